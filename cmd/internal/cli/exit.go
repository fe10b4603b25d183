package cli

import (
	"context"
	"errors"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/money"
	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
)

// Exit codes, stable across releases, the same condition the same code in
// every command, and documented in the README.
const (
	ExitOK          = 0   // done: every item refunded, skipped or pending (refund), clean (audit), no conflict (merge)
	ExitFailed      = 1   // items failed or left in doubt; audit findings; merge conflicts
	ExitUsage       = 2   // usage error, or input that cannot be read or was not understood
	ExitJournal     = 3   // an output could not be written (the journal: halted; merge's OUT; stdout, a closed pipe too)
	ExitLocked      = 4   // the journal is held by another run
	ExitCorrupt     = 5   // a journal is corrupt or of an unknown version
	ExitProvider    = 6   // the provider refused the key or could not be reached: halted
	ExitInterrupted = 130 // stopped by SIGINT (128+2) after journaling what was in flight
	ExitTerminated  = 143 // stopped by SIGTERM (128+15), the same way
)

// exitError is an error of a command that says which code it ends in, as
// gojq's errors do: the libraries' errors are typed instead, and mapped
// by exitCodeFor, the one place that knows both.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }

// withCode makes err end its command with code; nil stays nil.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// exitCodeFor is the exit code for err: its own if it carries one, else the
// code of the condition its type names. Anything else is input that could
// not be read or used: a usage error.
func exitCodeFor(err error) int {
	if code, ok := knownCode(err); ok {
		return code
	}
	return ExitUsage
}

// knownCode maps the errors that name a condition.
func knownCode(err error) (int, bool) {
	var (
		coded       interface{ ExitCode() int }
		halt        *refund.HaltError
		locked      *journal.LockedError
		notFile     *journal.NotFileError
		corrupt     *journal.CorruptError
		version     *journal.VersionError
		write       *journal.WriteError
		auditWrite  *audit.JournalError
		auditHalt   *audit.StripeError
		refundInput *refund.InputError
		pgFailed    *postgres.Error
		pgCorrupt   *postgres.CorruptError
		pgBusy      *postgres.BusyError
		pgConfig    *postgres.ConfigError
		workerName  *refund.WorkerNameError
		natsFailed  *natsjs.Error
		natsCorrupt *natsjs.CorruptError
		natsConfig  *natsjs.ConfigError
		natsUnsafe  *natsjs.DurabilityError
		natsBusy    *natsjs.BusyError
		overflow    *money.OverflowError
		notesLocked *notes.LockedError
		// A kept notification that does not verify (forged, or the wrong
		// ADYEN_HMAC_KEY), decode or is of an unknown version: an input
		// that cannot be trusted, as refund and audit say of it, not a
		// journal that is corrupt. The same in adyen-webhook for its own
		// --out.
		notesBad *notes.CorruptError
	)
	switch {
	case err == nil:
		return ExitOK, true
	case errors.As(err, &coded):
		return coded.ExitCode(), true
	case errors.Is(err, context.Canceled):
		return ExitInterrupted, true
	case errors.As(err, &halt):
		if halt.Journal {
			return ExitJournal, true
		}
		return ExitProvider, true
	case errors.As(err, &locked), errors.As(err, &pgBusy), errors.As(err, &natsBusy), errors.As(err, &notesLocked):
		return ExitLocked, true
	case errors.As(err, &corrupt), errors.As(err, &version), errors.As(err, &pgCorrupt), errors.As(err, &natsCorrupt):
		return ExitCorrupt, true
	case errors.As(err, &write), errors.As(err, &auditWrite), errors.As(err, &pgFailed), errors.As(err, &natsFailed), errors.As(err, &natsUnsafe):
		return ExitJournal, true
	case errors.As(err, &auditHalt):
		return ExitProvider, true
	case errors.As(err, &notFile), errors.As(err, &refundInput), // a *plan.Rejection holds *refund.InputErrors
		errors.As(err, &pgConfig), errors.As(err, &workerName), errors.As(err, &natsConfig), errors.As(err, &notesBad),
		errors.As(err, &overflow): // amounts that sum beyond int64 are input no total can hold
		return ExitUsage, true
	}
	return 0, false
}

// unwritable says that an error opening or writing a journal (or another
// output) that names no condition of its own (permission denied, EIO, a
// missing directory) means the output cannot be written.
func unwritable(err error) error {
	if _, ok := knownCode(err); ok {
		return err
	}
	return withCode(ExitJournal, err)
}
