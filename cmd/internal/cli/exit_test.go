package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/money"
	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
)

// Each condition maps to its code however deep the library wrapped it;
// exit_codes.txtar checks that every command ends with that code.
func TestExitCodeFor(t *testing.T) {
	write := &journal.WriteError{Path: "j.jsonl", Err: errors.New("no space left on device")}
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"usage", &usageError{"--rate: want 0 or more"}, ExitUsage},
		{"input line", fmt.Errorf("reading: %w", &refund.InputError{Name: "p", Line: 3, Err: errors.New("bad")}), ExitUsage},
		{"not a file", &journal.NotFileError{Path: "d", What: "a directory, not a file"}, ExitUsage},
		{"unknown error", errors.New("read p: input/output error"), ExitUsage},
		{"journal halt", &refund.HaltError{Journal: true, Err: write}, ExitJournal},
		{"journal write", write, ExitJournal},
		{"audit write", &audit.JournalError{Err: write}, ExitJournal},
		{"unwritable", unwritable(&fs.PathError{Op: "open", Path: "j", Err: fs.ErrPermission}), ExitJournal},
		{"locked", fmt.Errorf("open: %w", &journal.LockedError{Path: "j"}), ExitLocked},
		{"locked stays locked", unwritable(&journal.LockedError{Path: "j"}), ExitLocked},
		{"corrupt", fmt.Errorf("load: %w", &journal.CorruptError{Path: "j", Line: 2}), ExitCorrupt},
		{"corrupt stays corrupt", unwritable(&journal.CorruptError{Path: "j", Line: 2}), ExitCorrupt},
		{"version", &journal.VersionError{Version: 2}, ExitCorrupt},
		{"notification does not verify", unwritable(&notes.CorruptError{Where: "n", Line: 1, Reason: "no hmacSignature"}), ExitUsage},
		{"notifications held", unwritable(&notes.LockedError{Path: "n"}), ExitLocked},
		{"provider halt", &refund.HaltError{Err: errors.New("key refused")}, ExitProvider},
		{"audit provider", &audit.StripeError{Err: errors.New("key refused")}, ExitProvider},
		{"interrupted", fmt.Errorf("run: %w", context.Canceled), ExitInterrupted},
		{"carried", withCode(ExitJournal, errors.New("cannot write out")), ExitJournal},
		{"audit total overflows", &money.TotalError{What: "the refunded total", Where: "item i2 of batch b1", Err: &money.OverflowError{Currency: "usd", Sum: 1 << 62, Amount: 1 << 62}}, ExitUsage},
	} {
		if got := exitCodeFor(tc.err); got != tc.want {
			t.Errorf("%s: exitCodeFor(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}

// A run stopped early ends with its cause's code: the shell's for a
// signal, 3 for a stdout that could not be written (a closed pipe).
func TestInterruptedCode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause error
		code  int
		want  int
	}{
		{"SIGINT", interrupted{syscall.SIGINT}, ExitInterrupted, ExitInterrupted},
		{"SIGTERM", interrupted{syscall.SIGTERM}, ExitInterrupted, ExitTerminated},
		{"stdout", stdoutFailed{syscall.EPIPE}, ExitInterrupted, ExitJournal},
		{"stdout after a halt", stdoutFailed{syscall.EPIPE}, ExitProvider, ExitProvider},
		{"no cause", nil, ExitInterrupted, ExitInterrupted},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(tc.cause)
		if got := interruptedCode(ctx, tc.code); got != tc.want {
			t.Errorf("%s: interruptedCode(%d) = %d, want %d", tc.name, tc.code, got, tc.want)
		}
	}
}
