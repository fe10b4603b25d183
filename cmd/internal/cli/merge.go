package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"

	"github.com/refundkit/refundkit/journal"
)

type mergeArgs struct {
	Output    string      `short:"o" placeholder:"OUT" predictor:"file" help:"Write the merged journal to OUT (mode 0600, replaced atomically once complete) instead of stdout. A postgres:// URL imports the merge into that PostgreSQL checkpoint, in one transaction, with what it held merged in first; a nats:// URL adds to each item of that NATS checkpoint the records it lacks, everything checked before anything is written."`
	Batch     []string    `placeholder:"BATCH" help:"Read only these batches of a PostgreSQL checkpoint named as a JOURNAL (default: all it holds)."`
	Compact   bool        `help:"Keep one final record per item: its refund, else its final failure, else what keeps it in doubt (attempt, key age, burned key)."`
	AllowHeld bool        `name:"allow-held" help:"Merge journals that a running refund holds, as they stand: the merge is then a snapshot of a batch in progress, not a finished batch, and says so (without it such a merge is refused, exit 4)."`
	Version   versionFlag `help:"Print the version and exit."`
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
	// A directory named as a journal is a usage error, found before OUT
	// is touched.
	for _, path := range args.Journals {
		if info, err := os.Stat(path); err == nil && info.IsDir() {
			warnf(env.Stderr, name, "%v", &journal.NotFileError{Path: path, What: "a directory, not a file"})
			return ExitUsage
		}
	}

	// A journal a run still writes is half a batch: merged, it would read
	// as a finished one (audit without --plan finds nothing missing).
	held := heldInputs(args.Journals, args.Output)
	if len(held) > 0 && !args.AllowHeld {
		for _, path := range held {
			warnf(env.Stderr, name, "journal %s is held by a running refund: its batch is not done, and a merge of it would read as if it were", path)
		}
		warnf(env.Stderr, name, "nothing merged: merge when the run has finished, or give --allow-held for a snapshot of the batch as it stands")
		return ExitLocked
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
	inputs, done, err := exportInputs(env, name, args.Journals, args.Batch)
	if err != nil {
		return exitCodeFor(err)
	}
	defer done()
	names := displayNames(args.Journals)
	args.Journals = inputs

	// Output to a file goes to a temporary file beside it first, so a failed
	// merge leaves nothing half-written and the old file whole. OUT's lock is
	// held from before the first write until the rename is done: a run
	// writing OUT refuses the merge, and a run starting meanwhile is refused.
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
			warnf(env.Stderr, name, "%v", err) // locked, no journal file, or unwritable
			return exitCodeFor(err)
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
			err = outputError(args.Output, err)
			warnf(env.Stderr, name, "%v", err)
			return exitCodeFor(err)
		}
		defer pending.Cleanup()
		out = &outWriter{w: pending, path: args.Output}
	}

	report, err := journal.MergeWith(args.Journals, out, journal.MergeOptions{Compact: args.Compact})
	renameInputs(&report, inputs, names)
	for _, in := range report.Inputs {
		if in.Torn != nil {
			warnf(env.Stderr, name, "%s", in.Torn)
		}
	}
	if err != nil {
		warnf(env.Stderr, name, "%v", err)
		return exitCodeFor(err)
	}
	if pending != nil {
		if err := pending.CloseAtomicallyReplace(); err != nil {
			err = outputError(args.Output, err)
			warnf(env.Stderr, name, "%v", err)
			return exitCodeFor(err)
		}
		renamed = true
		if err := syncMergeDir(filepath.Dir(args.Output)); err != nil {
			err = outputError(args.Output, err)
			warnf(env.Stderr, name, "%v", err)
			return exitCodeFor(err)
		}
	}

	return reportMerge(env, name, report)
}

// reportMerge says what a merge did and ends it: exit 1 when items have
// conflicting outcomes.
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
		warnf(env.Stderr, name, "1 item has conflicting outcomes: all its records are kept; check it at the provider")
		return ExitFailed
	} else if n > 1 {
		warnf(env.Stderr, name, "%d items have conflicting outcomes: all their records are kept; check them at the provider", n)
		return ExitFailed
	}
	return ExitOK
}

// outWriter is OUT's temporary file, whose write errors name OUT: the
// temporary file means nothing to the person who asked for OUT.
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

// outputError is a failure to write OUT at path (exit 3), said in OUT's
// name: a missing directory is named, and the temporary file beside OUT
// that the merge writes first is not.
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

// syncMergeDir makes a rename in dir durable.
func syncMergeDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// heldInputs are the journal files among journals that a running refund
// holds (journal.Held), as named. A checkpoint's URL is not a file, and
// OUT named as a journal too is left to OUT's own lock, which refuses it
// if held. A journal that cannot be probed (missing, unreadable, not a
// file) is left to the merge, which says why it cannot read it.
func heldInputs(journals []string, out string) []string {
	var outInfo os.FileInfo
	if out != "" && !isShared(out) {
		outInfo, _ = os.Stat(out)
	}
	var held []string
	for _, path := range journals {
		if isShared(path) {
			continue
		}
		if outInfo != nil {
			if info, err := os.Stat(path); err == nil && os.SameFile(info, outInfo) {
				continue
			}
		}
		if h, err := journal.Held(path); err == nil && h {
			held = append(held, path)
		}
	}
	return held
}
