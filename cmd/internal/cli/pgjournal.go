package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
)

// checkpointExport is a shared checkpoint (PostgreSQL, NATS JetStream)
// exported as a file journal, for the tools that read journals (audit,
// journal-merge): the same record lines, in the order they were written,
// framed in commits.
type checkpointExport struct {
	name    string // the checkpoint's URL, password redacted
	path    string // the temporary journal (0600), removed by close
	records int
	last    int64 // the highest sequence number (revision) exported
	src     exportSource
	cp      *postgres.Checkpoint // when it is one: what Holders needs
	imp     importer             // opened to import into (importCheckpoint)
}

// exportSource is a shared checkpoint opened for reading.
type exportSource interface {
	Export(ctx context.Context, w io.Writer, batches []string) (records int, last int64, err error)
	ExportPlans(ctx context.Context, w io.Writer, batches []string) (int, error)
	Close() error
}

// importer is a shared checkpoint that journal-merge -o imports into
// (postgres.Checkpoint, natsjs.Checkpoint): each journal is checked
// against it first, so that an error names the journal and line, then
// the merge is imported.
type importer interface {
	CheckJournal(ctx context.Context, r io.Reader, name string) error
	Import(ctx context.Context, r io.Reader, name string, last int64) (records int, batches []string, err error)
}

// exportCheckpoint opens the checkpoint at connString read-only and
// exports the records of batches (all when none) to a temporary file.
func exportCheckpoint(ctx context.Context, connString, worker string, batches []string) (*checkpointExport, error) {
	x := &checkpointExport{name: redactCheckpoint(connString)}
	if natsjs.IsURL(connString) {
		cp, err := natsjs.Open(ctx, connString, natsjs.Options{Worker: worker}, true)
		if err != nil {
			return nil, err
		}
		x.src = cp
	} else {
		cp, err := postgres.Open(ctx, connString, postgres.Options{Worker: worker}, true)
		if err != nil {
			return nil, err
		}
		x.src, x.cp = cp, cp
	}
	if err := x.export(ctx, batches); err != nil {
		return nil, err
	}
	return x, nil
}

// importCheckpoint opens the checkpoint at connString to import into, and
// exports all its records to a temporary file. A PostgreSQL checkpoint is
// migrated first; a NATS one is opened as a worker opens it, which makes
// its bucket and checks its durability (warn hears what it cannot check).
func importCheckpoint(ctx context.Context, connString, worker string, warn func(string)) (*checkpointExport, error) {
	x := &checkpointExport{name: redactCheckpoint(connString)}
	if natsjs.IsURL(connString) {
		cp, err := natsjs.Open(ctx, connString, natsjs.Options{Worker: worker, Warn: warn}, false)
		if err != nil {
			return nil, err
		}
		x.src, x.imp = cp, cp
	} else {
		cp, err := postgres.Open(ctx, connString, postgres.Options{Worker: worker}, true)
		if err != nil {
			return nil, err
		}
		x.src, x.cp, x.imp = cp, cp, cp
	}
	if err := x.export(ctx, nil); err != nil {
		return nil, err
	}
	return x, nil
}

// export writes the records of batches (all when none) to a temporary
// file; on failure the checkpoint is closed.
func (x *checkpointExport) export(ctx context.Context, batches []string) error {
	dir, err := os.MkdirTemp("", "refundkit-export-")
	if err != nil {
		x.src.Close()
		return err
	}
	x.path = filepath.Join(dir, "checkpoint.jsonl")
	f, err := os.OpenFile(x.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil {
		x.records, x.last, err = x.src.Export(ctx, f, batches)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		x.close()
	}
	return err
}

// addPlans adds the plans the checkpoint stores for batches (all when
// none) to a, as audit --plan adds a plan file: its planned items without
// a refund are findings.
func (x *checkpointExport) addPlans(ctx context.Context, a *audit.Auditor, batches []string) error {
	path := filepath.Join(filepath.Dir(x.path), "plans.jsonl")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := x.src.ExportPlans(ctx, f, batches)
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
	x.src.Close()
}

// describeHolders writes who holds what in the checkpoint's batches (all
// when none): each batch's items by status, every claim with its lease,
// every worker with its last sign of life. It returns how many claims are
// live: items in flight, which read as in doubt.
func describeHolders(ctx context.Context, w io.Writer, name string, x *checkpointExport, batches []string) (int, error) {
	if js, ok := x.src.(*natsjs.Checkpoint); ok {
		bs, live, err := js.Holders(ctx, batches)
		if err != nil {
			return 0, err
		}
		for _, b := range bs {
			warnf(w, name, "%s: batch %s: %d items (%s), plan loaded %s by %s", x.name, b.Batch, b.Items, countsText(b.ByStatus), b.LoadedAt.UTC().Format(time.RFC3339), b.LoadedBy)
		}
		if live > 0 {
			warnf(w, name, "%s: %d %s delivered to workers and not acknowledged yet (in flight, or a worker's ack-wait not yet out)", x.name, live, plural(live, "item"))
		}
		return live, nil
	}
	bs, claims, workers, err := x.cp.Holders(ctx, batches)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	for _, b := range bs {
		warnf(w, name, "%s: batch %s: %d items (%s), plan loaded %s by %s", x.name, b.Batch, b.Items, countsText(b.ByStatus), b.LoadedAt.UTC().Format(time.RFC3339), b.LoadedBy)
	}
	live := 0
	for _, cl := range claims {
		state := "live"
		if cl.Expired {
			state = "expired: the next worker to claim it looks it up first"
		} else {
			live++
		}
		warnf(w, name, "%s: claim: item %s of batch %s by %s (generation %d), lease until %s (%s)", x.name, cl.Item, cl.Batch, cl.Worker, cl.Generation, cl.LeaseUntil.UTC().Format(time.RFC3339), state)
	}
	for _, wk := range workers {
		state := fmt.Sprintf("last seen %s ago", now.Sub(wk.LastSeen).Round(time.Second))
		if wk.Stopped != nil {
			state = "stopped " + wk.Stopped.UTC().Format(time.RFC3339)
		}
		warnf(w, name, "%s: worker %s (host %s, pid %d): %s, %d claims (%d live)", x.name, wk.Worker, wk.Host, wk.PID, state, wk.Claims, wk.LiveLease)
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
			label := k
			switch k {
			case "unknown":
				label = "not started"
			case "duplicate":
				label = "refunded twice"
			}
			s += fmt.Sprintf("%d %s", n, label)
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// exportInputs exports the PostgreSQL checkpoints among journals (their
// batches, or all) to temporary files, and returns journals with each
// replaced by its file; done removes them.
func exportInputs(env Env, name string, journals, batches []string) (inputs []string, done func(), err error) {
	var xs []*checkpointExport
	done = func() {
		for _, x := range xs {
			x.close()
		}
	}
	inputs = slices.Clone(journals)
	for i, path := range journals {
		if !isShared(path) {
			continue
		}
		x, err := exportCheckpoint(context.Background(), path, name, batches)
		if err != nil {
			warnf(env.Stderr, name, "%v", err)
			done()
			if code, ok := knownCode(err); ok && code == ExitCorrupt {
				return nil, nil, err
			}
			return nil, nil, withCode(ExitUsage, err) // an input that cannot be read
		}
		xs = append(xs, x)
		inputs[i] = x.path
		warnf(env.Stderr, name, "%s: %d records, read as %s", x.name, x.records, x.path)
	}
	return inputs, done, nil
}

// mergeIntoCheckpoint is journal-merge -o postgres://... or -o
// nats://...: the checkpoint's records and the journals merged, as a file
// merge does, each journal checked against the checkpoint first, then the
// merge imported. PostgreSQL imports it in one transaction that replaces
// the records of every batch the merge holds; NATS adds to each item the
// records it lacks, checking everything before it writes anything. Either
// is refused (exit 4) while workers hold live claims of what it would
// change, or when they wrote records there while the merge ran.
func mergeIntoCheckpoint(env Env, name string, args mergeArgs) int {
	if len(args.Batch) > 0 {
		warnf(env.Stderr, name, "--batch: an import merges the journals with all the checkpoint holds; drop --batch")
		return ExitUsage
	}
	if args.Compact && natsjs.IsURL(args.Output) {
		warnf(env.Stderr, name, "--compact: an import into a NATS checkpoint adds records to its items and takes none away; drop --compact (or compact into a file)")
		return ExitUsage
	}
	ctx := context.Background()
	// An import is a writer: it creates and migrates the schema as a
	// worker does (the readers, audit and the export, write nothing).
	if postgres.IsURL(args.Output) {
		if err := postgres.Migrate(ctx, args.Output); err != nil {
			warnf(env.Stderr, name, "%v", err)
			warnf(env.Stderr, name, "nothing was imported: the checkpoint is as it was")
			return exitCodeFor(unwritable(err))
		}
	}
	x, err := importCheckpoint(ctx, args.Output, name, func(msg string) { warnf(env.Stderr, name, "%s", msg) })
	if err != nil {
		warnf(env.Stderr, name, "%v", err)
		return exitCodeFor(unwritable(err))
	}
	defer x.close()
	inputs, done, err := exportInputs(env, name, args.Journals, nil)
	if err != nil {
		return exitCodeFor(err)
	}
	defer done()
	// Records that bind an item otherwise than the checkpoint does are
	// refused, journal by journal so that the error names the journal and
	// line; Import checks the merge again.
	names := displayNames(args.Journals)
	for i, path := range inputs {
		if err := checkImported(ctx, x.imp, path, names[i]); err != nil {
			warnf(env.Stderr, name, "%v", err)
			warnf(env.Stderr, name, "nothing was imported: the checkpoint is as it was")
			return exitCodeFor(unwritable(err))
		}
	}
	merged := filepath.Join(filepath.Dir(x.path), "merged.jsonl")
	f, err := os.OpenFile(merged, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		warnf(env.Stderr, name, "%v", err)
		return ExitJournal
	}
	defer f.Close()
	report, err := journal.MergeWith(append([]string{x.path}, inputs...), f, journal.MergeOptions{Compact: args.Compact})
	renameInputs(&report, append([]string{x.path}, inputs...), append([]string{x.name}, names...))
	for _, in := range report.Inputs {
		if in.Torn != nil {
			warnf(env.Stderr, name, "%s", in.Torn)
		}
	}
	if err != nil {
		warnf(env.Stderr, name, "%v", err)
		return exitCodeFor(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		warnf(env.Stderr, name, "%v", err)
		return ExitJournal
	}
	n, batches, err := x.imp.Import(ctx, f, "the merge of "+strings.Join(names, ", "), x.last)
	if err != nil {
		warnf(env.Stderr, name, "%s: %v", x.name, err)
		if !errors.As(err, new(*natsjs.PartialImportError)) {
			warnf(env.Stderr, name, "nothing was imported: the checkpoint is as it was")
		}
		return exitCodeFor(unwritable(err))
	}
	if n == 0 {
		warnf(env.Stderr, name, "%s: nothing new imported: it holds every record of the merge already", x.name)
	} else {
		warnf(env.Stderr, name, "%s: imported %d %s of %d %s (%s)", x.name, n, plural(n, "record"), len(batches), map[bool]string{true: "batch", false: "batches"}[len(batches) == 1], strings.Join(batches, ", "))
	}
	return reportMerge(env, name, report)
}

// checkImported checks the journal at path, named name, against the
// checkpoint it is to be imported into.
func checkImported(ctx context.Context, cp importer, path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	defer f.Close()
	return cp.CheckJournal(ctx, f, name)
}

// displayNames are journals as messages name them: a checkpoint's URL
// with its password redacted.
func displayNames(journals []string) []string {
	names := make([]string, len(journals))
	for i, j := range journals {
		names[i] = redactCheckpoint(j)
	}
	return names
}

// renameInputs makes report name each input read from paths[i] as
// names[i]: a checkpoint by its URL, not the temporary file it was
// exported to.
func renameInputs(report *journal.MergeReport, paths, names []string) {
	rename := func(loc string) string {
		for i, p := range paths {
			if rest, ok := strings.CutPrefix(loc, p+":"); ok && p != names[i] {
				return names[i] + ":" + rest
			}
		}
		return loc
	}
	for i := range report.Conflicts {
		report.Conflicts[i].First = rename(report.Conflicts[i].First)
		report.Conflicts[i].Second = rename(report.Conflicts[i].Second)
	}
	for _, in := range report.Inputs {
		if in.Torn != nil {
			for i, p := range paths {
				if in.Torn.Path == p {
					in.Torn.Path = names[i]
				}
			}
		}
	}
}
