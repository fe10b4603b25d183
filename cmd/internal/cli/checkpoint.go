package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
)

// sharedCheckpoint is *postgres.Checkpoint or *natsjs.Checkpoint.
type sharedCheckpoint interface {
	refund.Checkpoint
	Export(ctx context.Context, w io.Writer, batches []string) (records int, last int64, err error)
	ExportPlans(ctx context.Context, w io.Writer, batches []string) (int, error)
	// journal-merge -o URL's: each journal checked first, errors at file:line.
	CheckJournal(ctx context.Context, r io.Reader, name string) error
	Import(ctx context.Context, r io.Reader, name string, last int64) (records int, batches []string, err error)
	Close() error
}

// openShared opens NATS at a nats:// url, else PostgreSQL (no RetryHeld).
func openShared(ctx context.Context, url string, o natsjs.Options, readOnly bool) (sharedCheckpoint, error) {
	if natsjs.IsURL(url) {
		return natsjs.Open(ctx, url, o, readOnly)
	}
	return postgres.Open(ctx, url, postgres.Options{Lease: o.Lease, Worker: o.Worker, Warn: o.Warn}, readOnly)
}

// openCheckpoint opens refund's checkpoint: shared, or the journal file,
// locked (only read in a dry run).
func (c *refundCmd) openCheckpoint(ctx context.Context, msgs io.Writer, name string) (refund.Checkpoint, func(), error) {
	warn := func(msg string) { warnf(msgs, name, "%s", msg) }
	if isShared(c.Journal) {
		cp, err := openShared(ctx, c.Journal, natsjs.Options{Lease: c.Lease, Worker: c.Worker, RetryHeld: c.AllowRefunded, Warn: warn}, c.DryRun)
		if err != nil {
			return nil, nil, err
		}
		return cp, func() { cp.Close() }, nil
	}
	var (
		w     *journal.Writer
		state *journal.State
		torn  *journal.Torn
		err   error
	)
	if c.DryRun {
		if state, torn, err = journal.Load(c.Journal); errors.Is(err, os.ErrNotExist) {
			state, err = journal.NewState(), nil
		}
	} else {
		w, state, torn, err = journal.Open(c.Journal, journal.Options{NoGroupCommit: c.NoGroupCommit})
	}
	if err != nil {
		return nil, nil, err
	}
	if torn != nil {
		warn(torn.String())
	}
	return refund.Journal(w, state), func() {
		if w != nil {
			w.Close()
		}
	}, nil
}

// isShared reports a --journal that is a URL, not a journal file.
func isShared(journal string) bool { return postgres.IsURL(journal) || natsjs.IsURL(journal) }

// redactCheckpoint names a checkpoint in messages, its password redacted.
func redactCheckpoint(journal string) string {
	switch {
	case postgres.IsURL(journal):
		return postgres.Redact(journal)
	case natsjs.IsURL(journal):
		return natsjs.Redact(journal)
	}
	return journal
}

// checkpointExport is a shared checkpoint exported as a journal file for
// audit and journal-merge: its record lines in order, framed in commits.
type checkpointExport struct {
	name    string // the checkpoint's URL, password redacted
	path    string // the temporary journal (0600), removed by close
	records int
	last    int64 // the highest sequence number (revision) exported
	cp      sharedCheckpoint
}

// exportCheckpoint exports url's batches (all when none) to a temporary
// file. With importWarn NATS opens as a worker's, to import into.
func exportCheckpoint(ctx context.Context, url, worker string, batches []string, importWarn func(string)) (*checkpointExport, error) {
	opts, readOnly := natsjs.Options{Worker: worker}, true
	if importWarn != nil && natsjs.IsURL(url) {
		opts.Warn, readOnly = importWarn, false
	}
	cp, err := openShared(ctx, url, opts, readOnly)
	if err != nil {
		return nil, err
	}
	x := &checkpointExport{name: redactCheckpoint(url), cp: cp}
	dir, err := os.MkdirTemp("", "refundkit-export-")
	if err != nil {
		cp.Close()
		return nil, err
	}
	x.path = filepath.Join(dir, "checkpoint.jsonl")
	f, err := os.OpenFile(x.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil {
		x.records, x.last, err = cp.Export(ctx, f, batches)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		x.close()
		return nil, err
	}
	return x, nil
}

// addPlans adds the checkpoint's stored plans to a, as audit --plan does.
func (x *checkpointExport) addPlans(ctx context.Context, a *audit.Auditor, batches []string) error {
	f, err := os.OpenFile(filepath.Join(filepath.Dir(x.path), "plans.jsonl"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := x.cp.ExportPlans(ctx, f, batches)
	if err != nil {
		return withCode(ExitUsage, err) // the checkpoint cannot be read
	}
	if n == 0 {
		return nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return a.AddPlan(f, x.name+" (the plans it stores)")
}

func (x *checkpointExport) close() {
	os.RemoveAll(filepath.Dir(x.path))
	x.cp.Close()
}

// describeHolders tells each batch's items, claims and workers, and returns
// the live claims: items in flight, which read as in doubt.
func describeHolders(ctx context.Context, w io.Writer, name string, x *checkpointExport, batches []string) (int, error) {
	say := func(format string, args ...any) { warnf(w, name, "%s: "+format, append([]any{x.name}, args...)...) }
	var (
		bs      []refund.BatchInfo
		claims  []postgres.ClaimInfo
		workers []postgres.WorkerInfo
		live    int
		err     error
	)
	js, isNATS := x.cp.(*natsjs.Checkpoint)
	if isNATS {
		bs, live, err = js.Holders(ctx, batches)
	} else {
		bs, claims, workers, err = x.cp.(*postgres.Checkpoint).Holders(ctx, batches)
	}
	if err != nil {
		return 0, err
	}
	now := time.Now()
	for _, b := range bs {
		say("batch %s: %d items (%s), plan loaded %s by %s", b.Batch, b.Items, countsText(b.ByStatus), b.LoadedAt.UTC().Format(time.RFC3339), b.LoadedBy)
	}
	if isNATS && live > 0 {
		say("%d %s delivered to workers and not acknowledged yet (in flight, or a worker's ack-wait not yet out)", live, plural(live, "item"))
	}
	for _, cl := range claims {
		state := "live"
		if cl.Expired {
			state = "expired: the next worker to claim it looks it up first"
		} else {
			live++
		}
		say("claim: item %s of batch %s by %s (generation %d), lease until %s (%s)", cl.Item, cl.Batch, cl.Worker, cl.Generation, cl.LeaseUntil.UTC().Format(time.RFC3339), state)
	}
	for _, wk := range workers {
		state := fmt.Sprintf("last seen %s ago", now.Sub(wk.LastSeen).Round(time.Second))
		if wk.Stopped != nil {
			state = "stopped " + wk.Stopped.UTC().Format(time.RFC3339)
		}
		say("worker %s (host %s, pid %d): %s, %d claims (%d live)", wk.Worker, wk.Host, wk.PID, state, wk.Claims, wk.LiveLease)
	}
	return live, nil
}

// countsText is "3 refunded, 1 in_doubt" in a fixed order.
func countsText(by map[string]int) string {
	s := ""
	for _, k := range []string{"refunded", "duplicate", "failed", "pending", "in_doubt", "unknown"} {
		if n := by[k]; n > 0 {
			if s != "" {
				s += ", "
			}
			label := map[string]string{"unknown": "not started", "duplicate": "refunded twice"}[k]
			s += fmt.Sprintf("%d %s", n, cmp.Or(label, k))
		}
	}
	return cmp.Or(s, "none")
}

// exportInputs replaces the checkpoints among journals by exported files
// (xs[i] is journals[i]'s, else nil), each given to each; done removes them.
func exportInputs(env Env, name string, journals, batches []string, each func(*checkpointExport) error) (inputs []string, xs []*checkpointExport, done func(), err error) {
	inputs, xs = slices.Clone(journals), make([]*checkpointExport, len(journals))
	done = func() {
		for _, x := range xs {
			if x != nil {
				x.close()
			}
		}
	}
	for i, path := range journals {
		if !isShared(path) {
			continue
		}
		x, err := exportCheckpoint(context.Background(), path, name, batches, nil)
		if err != nil {
			err = exportError(err)
		} else {
			xs[i], inputs[i] = x, x.path
			err = each(x)
		}
		if err != nil {
			warnf(env.Stderr, name, "%v", err)
			done()
			return nil, nil, nil, err
		}
	}
	return inputs, xs, done, nil
}

// exportError: corrupt (exit 5), else an unreadable input.
func exportError(err error) error {
	if code, ok := knownCode(err); ok && code == ExitCorrupt {
		return err
	}
	return withCode(ExitUsage, err)
}
