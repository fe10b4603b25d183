package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// One writer per journal, whatever the tool: journal-merge -o takes its
// output's lock, and a writer whose journal is replaced behind its back (by
// a tool that does not) halts.

const otherJournal = `{"v":1,"type":"intent","ts":"2024-05-01T12:00:00Z","batch":"other","item":"o1","charge":"ch_o1","attempt":1,"key":"refundkit:other:o1:1","amount":500}
`

// fileSnapshot is a file's bytes and identity, to prove it untouched.
type fileSnapshot struct {
	data []byte
	info os.FileInfo
}

func snapshot(t *testing.T, path string) fileSnapshot {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileSnapshot{data, info}
}

func (s fileSnapshot) check(t *testing.T, path string) {
	t.Helper()
	now := snapshot(t, path)
	if !os.SameFile(now.info, s.info) {
		t.Errorf("%s was replaced by another file", path)
	}
	if !bytes.Equal(now.data, s.data) {
		t.Errorf("%s changed:\n%s\nwant\n%s", path, now.data, s.data)
	}
}

// TestMergeRefusesLockedOutput: an OUT held by a writer is refused with the
// writer's own *LockedError message and exit 4, compaction in place too, and
// OUT stays the same file with the same bytes.
func TestMergeRefusesLockedOutput(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "j.jsonl")
	other := filepath.Join(dir, "other.jsonl")
	if err := os.WriteFile(other, []byte(otherJournal), 0o600); err != nil {
		t.Fatal(err)
	}
	w, _, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rec := &journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: time.Date(2024, 5, 1, 12, 0, 1, 0, time.UTC),
		Batch: "b", Item: "i1", Charge: "ch_1", Attempt: 1, Key: "refundkit:b:i1:1"}
	if err := w.Append(rec); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, path)
	for _, args := range [][]string{
		{"-o", path, other},
		{"-o", path, path, other},
		{"--compact", "-o", path, path},
	} {
		var stdout, stderr bytes.Buffer
		code := JournalMerge(Env{Args: args, Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
		if want := "journal-merge: journal " + path + " is locked by another run\n"; code != ExitLocked || stderr.String() != want || stdout.Len() != 0 {
			t.Errorf("journal-merge %q onto a held journal: exit %d, stderr %q; want exit %d, %q", args, code, stderr.String(), ExitLocked, want)
		}
		before.check(t, path)
	}
	if err := w.Append(rec); err != nil {
		t.Errorf("the writer after the refused merges: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("files left in the directory: %v", entries)
	}
}

// TestMergeOntoLiveRunIsRefused: journal-merge -o J while a real refund run
// writes J, with calls held in flight at the simulator. The merge is refused
// (exit 4) and J is untouched; the run then finishes, every item refunded
// once and journaled in J.
func TestMergeOntoLiveRunIsRefused(t *testing.T) {
	const items, workers = 20, 4
	r := newCrashRig(t, items, stripesim.Faults{})
	path := filepath.Join(r.dir, "j.jsonl")
	other := filepath.Join(r.dir, "other.jsonl")
	if err := os.WriteFile(other, []byte(otherJournal), 0o600); err != nil {
		t.Fatal(err)
	}
	held, release := holdCreates(t, r, workers)

	run, runErr := r.start(path, "-j", fmt.Sprint(workers))
	held() // every worker has journaled its intent and waits for Stripe
	before := snapshot(t, path)
	merge, err := exec.LookPath("journal-merge")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-o", path, other}, {"--compact", "-o", path, path}} {
		cmd := exec.Command(merge, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if code := crashrig.ExitCode(err); code != ExitLocked {
			t.Errorf("journal-merge %q during the run exited %d, want %d: %s", args, code, ExitLocked, &stderr)
		}
		if want := "journal " + path + " is locked by another run"; !strings.Contains(stderr.String(), want) {
			t.Errorf("journal-merge's stderr does not say %q: %s", want, &stderr)
		}
		before.check(t, path)
	}
	release()
	if err := run.Wait(); err != nil {
		t.Fatalf("the run: %v: %s", err, runErr)
	}
	r.checkExactlyOnce(path, items)
	r.checkIntentsCoverCalls(path)
}

// TestJournalReplacedUnderRunHalts: with calls in flight, J is replaced by a
// copy renamed over it, as an unlocked merge would do. The run halts with
// exit 3 at its next commit, saying so, and makes no call after; every key
// the simulator received has its intent in J; the rerun, a day later (keys
// forgotten), refunds every item exactly once.
func TestJournalReplacedUnderRunHalts(t *testing.T) {
	const items, workers = 40, 4
	r := newCrashRig(t, items, stripesim.Faults{})
	path := filepath.Join(r.dir, "j.jsonl")
	held, release := holdCreates(t, r, workers)

	run, runErr := r.start(path, "-j", fmt.Sprint(workers))
	held()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(r.dir, ".j.jsonl.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	release()
	err = run.Wait()
	if code := crashrig.ExitCode(err); code != ExitJournal {
		t.Fatalf("the run exited %d after its journal was replaced, want %d: %s", code, ExitJournal, runErr)
	}
	if !strings.Contains(runErr.String(), "replaced by another file while this run held it") {
		t.Errorf("stderr does not say the journal was replaced: %s", runErr)
	}
	if calls := r.sim.Creates(); calls != workers {
		t.Errorf("%d create calls, want the %d in flight at the replacement and no more", calls, workers)
	}
	r.checkIntentsCoverCalls(path)

	r.sim.ForgetKeys()
	rerun, rerunErr := r.start(path, "-j", fmt.Sprint(workers))
	if err := rerun.Wait(); err != nil {
		t.Fatalf("rerun: %v: %s", err, rerunErr)
	}
	r.checkExactlyOnce(path, items)
	r.checkIntentsCoverCalls(path)
}

// holdCreates holds the first n refund creates at the simulator until
// release is called; held waits until all n are held (or fails after 30 s).
func holdCreates(t *testing.T, r *crashRig, n int) (held, release func()) {
	t.Helper()
	h := crashrig.NewHold(1, int64(n))
	t.Cleanup(h.Free) // before the simulator closes: it waits for its hook
	r.sim.OnCreate(h.Park)
	held = func() {
		t.Helper()
		select {
		case <-h.Held():
		case <-time.After(30 * time.Second):
			t.Fatalf("fewer than %d refund calls in flight after 30 s", n)
		}
	}
	return held, h.Free
}
