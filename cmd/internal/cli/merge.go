package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/renameio/v2"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/journal/durable"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
)

type mergeArgs struct {
	Output    string   `short:"o" placeholder:"OUT" predictor:"file" help:"Write the merged journal to OUT (mode 0600, replaced atomically once complete) instead of stdout. A postgres:// URL imports the merge into that PostgreSQL checkpoint, in one transaction, with what it held merged in first; a nats:// URL adds to each item of that NATS checkpoint the records it lacks, everything checked before anything is written."`
	Batch     []string `placeholder:"BATCH" help:"Read only these batches of a PostgreSQL checkpoint named as a JOURNAL (default: all it holds)."`
	Compact   bool     `help:"Keep one final record per item: its refund, else its final failure, else what keeps it in doubt (attempt, key age, burned key)."`
	AllowHeld bool     `name:"allow-held" help:"Merge journals that a running refund holds, as they stand: the merge is then a snapshot of a batch in progress, not a finished batch, and says so (without it such a merge is refused, exit 4)."`
	logFormatFlag
	Journals []string `arg:"" placeholder:"JOURNAL" predictor:"file" help:"Journals to merge; a postgres:// URL reads a PostgreSQL checkpoint as the journal lines it holds."`
}

const mergeDescription = `Merge refund journals (shards, or runs on several machines) into one journal.

Records are written in ts order; records with the same ts keep the order of the journals as named, then their order within their journal. Identical records are written once. A torn final record is reported and left out. Corruption stops the merge (exit 5) with file:line. Conflicting outcomes for an item (two refunds, or a refund and a final failure) are all kept and reported on stderr (exit 1).

A journal that a running refund holds is refused (exit 4): its batch is not done, and a merge of it would read as if it were. --allow-held merges it as it stands, and says the merge is a snapshot of a batch in progress.

With -o, OUT is locked as refund locks its journal, from before the merge until the merged file replaces it: a journal a run is writing is refused (exit 4), and OUT may be one of the journals merged (compaction in place).

With -o postgres://... or -o nats://..., the merge of the checkpoint's own records and the journals is imported into that checkpoint. Each journal is checked against it first: records that contradict the plan it stores are refused with file:line (exit 2), as are, in a NATS checkpoint, records that contradict the records it holds or credit a refund to another item. The import is refused (exit 4) while workers hold what it would change. Either way nothing is imported.

Exit codes: 0 merged; 1 conflicting outcomes (all kept); 2 usage error, records imported that contradict the checkpoint's plan (none imported), or an input missing or a directory; 3 the output could not be written (stdout: a closed pipe too); 4 OUT is locked by another run, or a journal to merge is held by a running refund (without --allow-held); 5 corrupt input or unknown version.`

// JournalMerge is the journal-merge command: it merges journals into one.
func JournalMerge(env Env) (exit int) {
	const name = "journal-merge"
	var args mergeArgs
	if code, done := parse(env, name, mergeDescription, &args); done {
		return code
	}
	catchBrokenPipe()
	env.Stderr = args.messages(env.Stderr, name)
	// A directory named as a journal is found before OUT is touched.
	for _, path := range args.Journals {
		if info, err := os.Stat(path); err == nil && info.IsDir() {
			return usage(env.Stderr, name, &journal.NotFileError{Path: path, What: "a directory, not a file"})
		}
	}

	// A journal a run still writes is half a batch that would read as done.
	// OUT is left to its own lock; a journal not probed, to the merge, which says why.
	var held []string
	outInfo, _ := os.Stat(args.Output)
	for _, path := range args.Journals {
		if h, _ := heldJournal(path, path, outInfo); h {
			held = append(held, path)
		}
	}
	if len(held) > 0 && !args.AllowHeld {
		for _, path := range held {
			warnf(env.Stderr, name, "journal %s is held by a running refund: its batch is not done, and a merge of it would read as if it were", path)
		}
		return failf(env.Stderr, name, ExitLocked, "nothing merged: merge when the run has finished, or give --allow-held for a snapshot of the batch as it stands")
	}
	if len(held) > 0 {
		defer func() {
			if exit != ExitOK && exit != ExitFailed {
				return // nothing merged
			}
			for _, path := range held {
				warnf(env.Stderr, name, "journal %s was held by a running refund: merged as it stood", path)
			}
			warnf(env.Stderr, name, "the merge is a snapshot of a batch in progress, not a finished batch: its items in flight are in doubt in it and items not yet started are in no journal; merge again when the run has finished, and audit with --plan")
		}()
	}

	if isShared(args.Output) {
		return mergeIntoCheckpoint(env, name, args)
	}
	inputs, _, done, err := exportInputs(env, name, args.Journals, args.Batch, readAs(env, name))
	if err != nil {
		return exitCodeFor(err)
	}
	defer done()

	// OUT: a temporary file beside it, renamed over it, locked throughout.
	out := io.Writer(&outWriter{w: env.Stdout, path: "stdout"})
	var (
		pending *renameio.PendingFile
		renamed bool
	)
	if args.Output != "" {
		lock, err := journal.TakeLock(args.Output)
		if err != nil {
			if _, named := knownCode(err); !named {
				err = outputError(args.Output, err)
			}
			return fail(env.Stderr, name, err) // locked, no journal file, or unwritable
		}
		defer func() {
			if renamed {
				lock.Release()
			} else {
				lock.Discard() // an OUT this merge created goes with it
			}
		}()
		pending, err = renameio.NewPendingFile(args.Output,
			renameio.WithTempDir(filepath.Dir(args.Output)), renameio.WithStaticPermissions(0o600))
		if err != nil {
			return fail(env.Stderr, name, outputError(args.Output, err))
		}
		defer pending.Cleanup()
		out = &outWriter{w: pending, path: args.Output}
	}

	report, err := mergeJournals(env, name, inputs, displayNames(args.Journals), out, args.Compact)
	if err != nil {
		return exitCodeFor(err)
	}
	if pending != nil {
		if err := pending.CloseAtomicallyReplace(); err != nil {
			return fail(env.Stderr, name, outputError(args.Output, err))
		}
		renamed = true
		// outputError names OUT, not the directory.
		if err := durable.SyncDir("journal", args.Output); err != nil {
			return fail(env.Stderr, name, outputError(args.Output, err))
		}
	}
	return reportMerge(env, name, report)
}

// mergeJournals merges paths (named names) into out, telling torn records.
func mergeJournals(env Env, name string, paths, names []string, out io.Writer, compact bool) (journal.MergeReport, error) {
	report, err := journal.MergeWith(paths, out, journal.MergeOptions{Compact: compact})
	renameInputs(&report, paths, names)
	for _, in := range report.Inputs {
		if in.Torn != nil {
			warnf(env.Stderr, name, "%s", in.Torn)
		}
	}
	if err != nil {
		warnf(env.Stderr, name, "%v", err)
	}
	return report, err
}

// mergeIntoCheckpoint is journal-merge -o URL: the checkpoint's records and
// the journals merged, each journal checked against it first, then imported
// (refused, exit 4, while workers hold what it would change).
func mergeIntoCheckpoint(env Env, name string, args mergeArgs) int {
	const untouched = "nothing was imported: the checkpoint is as it was"
	if len(args.Batch) > 0 {
		return failf(env.Stderr, name, ExitUsage, "--batch: an import merges the journals with all the checkpoint holds; drop --batch")
	}
	if args.Compact && natsjs.IsURL(args.Output) {
		return failf(env.Stderr, name, ExitUsage, "--compact: an import into a NATS checkpoint adds records to its items and takes none away; drop --compact (or compact into a file)")
	}
	ctx := context.Background()
	// An import is a writer: it migrates the schema as a worker does.
	if postgres.IsURL(args.Output) {
		if err := postgres.Migrate(ctx, args.Output); err != nil {
			warnf(env.Stderr, name, "%v", err)
			return failf(env.Stderr, name, exitCodeFor(unwritable(err)), untouched)
		}
	}
	x, err := exportCheckpoint(ctx, args.Output, name, nil, func(msg string) { warnf(env.Stderr, name, "%s", msg) })
	if err != nil {
		return fail(env.Stderr, name, unwritable(err))
	}
	defer x.close()
	inputs, _, done, err := exportInputs(env, name, args.Journals, nil, readAs(env, name))
	if err != nil {
		return exitCodeFor(err)
	}
	defer done()
	// Checked journal by journal, so an error names the journal and line.
	names := displayNames(args.Journals)
	for i, path := range inputs {
		if err := checkImported(ctx, x.cp, path, names[i]); err != nil {
			warnf(env.Stderr, name, "%v", err)
			return failf(env.Stderr, name, exitCodeFor(unwritable(err)), untouched)
		}
	}
	f, err := os.OpenFile(filepath.Join(filepath.Dir(x.path), "merged.jsonl"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return fail(env.Stderr, name, withCode(ExitJournal, err))
	}
	defer f.Close()
	report, err := mergeJournals(env, name, append([]string{x.path}, inputs...), append([]string{x.name}, names...), f, args.Compact)
	if err != nil {
		return exitCodeFor(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(env.Stderr, name, withCode(ExitJournal, err))
	}
	n, batches, err := x.cp.Import(ctx, f, "the merge of "+strings.Join(names, ", "), x.last)
	if err != nil {
		warnf(env.Stderr, name, "%s: %v", x.name, err)
		if !isErr[*natsjs.PartialImportError](err) {
			warnf(env.Stderr, name, untouched)
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

// checkImported checks the journal at path, named name, against cp.
func checkImported(ctx context.Context, cp sharedCheckpoint, path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	defer f.Close()
	return cp.CheckJournal(ctx, f, name)
}

// displayNames are journals as messages name them (passwords redacted).
func displayNames(journals []string) []string {
	names := make([]string, len(journals))
	for i, j := range journals {
		names[i] = redactCheckpoint(j)
	}
	return names
}

// renameInputs names paths[i] names[i] in report: a URL, not a temp file.
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
			if i := slices.Index(paths, in.Torn.Path); i >= 0 {
				in.Torn.Path = names[i]
			}
		}
	}
}

// reportMerge says what a merge did: exit 1 on conflicting outcomes.
func reportMerge(env Env, name string, report journal.MergeReport) int {
	for _, c := range report.Conflicts {
		warnf(env.Stderr, name, "conflict: %s", c)
	}
	summary := fmt.Sprintf("%d %s from %d %s", report.Records, plural(report.Records, "record"), len(report.Inputs), plural(len(report.Inputs), "journal"))
	if n := report.Duplicates; n > 0 {
		summary += fmt.Sprintf(", %d identical %s left out", n, plural(n, "record"))
	}
	if n := report.Compacted; n > 0 {
		summary += fmt.Sprintf(", %d %s compacted away", n, plural(n, "record"))
	}
	warnf(env.Stderr, name, "%s", summary)
	items := map[[2]string]bool{} // an item may conflict more than once
	for _, c := range report.Conflicts {
		items[[2]string{c.Batch, c.Item}] = true
	}
	if n := len(items); n == 1 {
		return failf(env.Stderr, name, ExitFailed, "1 item has conflicting outcomes: all its records are kept; check it at the provider")
	} else if n > 1 {
		return failf(env.Stderr, name, ExitFailed, "%d items have conflicting outcomes: all their records are kept; check them at the provider", n)
	}
	return ExitOK
}

// outWriter is OUT's temporary file, whose write errors name OUT.
type outWriter struct {
	w    io.Writer
	path string
}

func (o *outWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil {
		err = outputError(o.path, err)
	}
	return n, err
}

// outputError is a failure to write OUT (exit 3) in OUT's name, not the
// temporary file's; a missing directory is named.
func outputError(path string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		if dir := filepath.Dir(path); !isDir(dir) {
			return withCode(ExitJournal, fmt.Errorf("cannot write %s: directory %s does not exist", path, dir))
		}
	}
	var pathErr *fs.PathError
	var linkErr *os.LinkError
	switch {
	case errors.As(err, &pathErr):
		err = pathErr.Err
	case errors.As(err, &linkErr):
		err = linkErr.Err
	}
	return withCode(ExitJournal, fmt.Errorf("cannot write %s: %w", path, err))
}

func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}

// heldJournal reports a journal file a running refund holds, but skip (a
// file the command holds itself); a directory, named name, is refused.
func heldJournal(path, name string, skip os.FileInfo) (bool, error) {
	info, err := os.Stat(path)
	switch {
	case err != nil:
		return false, nil
	case info.IsDir():
		return false, &journal.NotFileError{Path: name, What: "a directory, not a file"}
	case !info.Mode().IsRegular() || skip != nil && os.SameFile(info, skip):
		return false, nil
	}
	held, _ := journal.Held(path)
	return held, nil
}

// readAs tells which file journal-merge reads an exported checkpoint as.
func readAs(env Env, name string) func(*checkpointExport) error {
	return func(x *checkpointExport) error {
		warnf(env.Stderr, name, "%s: %d records, read as %s", x.name, x.records, x.path)
		return nil
	}
}
