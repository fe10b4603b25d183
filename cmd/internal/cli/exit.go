package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/money"
	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
)

// Exit codes, stable and documented in the README: one per condition.
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

// exitError names its exit code; knownCode maps the libraries' types.
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

// exitCodeFor is err's known code, else ExitUsage.
func exitCodeFor(err error) int {
	if code, ok := knownCode(err); ok {
		return code
	}
	return ExitUsage
}

// knownCode maps the errors that name a condition.
func knownCode(err error) (int, bool) {
	coded, isCoded := errors.AsType[interface {
		error
		ExitCode() int
	}](err)
	halt, isHalt := errors.AsType[*refund.HaltError](err)
	switch {
	case err == nil:
		return ExitOK, true
	case isCoded:
		return coded.ExitCode(), true
	case errors.Is(err, context.Canceled):
		return ExitInterrupted, true
	case isHalt && halt.Journal:
		return ExitJournal, true
	case isHalt:
		return ExitProvider, true
	case isErr[*journal.LockedError](err), isErr[*postgres.BusyError](err), isErr[*natsjs.BusyError](err), isErr[*notes.LockedError](err):
		return ExitLocked, true
	case isErr[*journal.CorruptError](err), isErr[*journal.VersionError](err), isErr[*postgres.CorruptError](err), isErr[*natsjs.CorruptError](err):
		return ExitCorrupt, true
	case isErr[*journal.WriteError](err), isErr[*audit.JournalError](err), isErr[*postgres.Error](err), isErr[*natsjs.Error](err), isErr[*natsjs.DurabilityError](err):
		return ExitJournal, true
	case isErr[*audit.StripeError](err):
		return ExitProvider, true
	case isErr[*journal.NotFileError](err), isErr[*refund.InputError](err), // a *plan.Rejection holds *refund.InputErrors
		isErr[*postgres.ConfigError](err), isErr[*refund.WorkerNameError](err), isErr[*natsjs.ConfigError](err),
		isErr[*notes.CorruptError](err),  // a kept notification that does not verify: untrusted input
		isErr[*money.OverflowError](err): // amounts that sum beyond int64 are input no total can hold
		return ExitUsage, true
	}
	return 0, false
}

// isErr reports an error of type E in err's chain.
func isErr[E error](err error) bool {
	_, ok := errors.AsType[E](err)
	return ok
}

// unwritable makes an output error of no known condition exit 3.
func unwritable(err error) error {
	if _, ok := knownCode(err); ok {
		return err
	}
	return withCode(ExitJournal, err)
}

// usage prints err and ends the command with ExitUsage.
func usage(w io.Writer, name string, err error) int { return failf(w, name, ExitUsage, "%v", err) }

// fail prints err and ends the command with err's exit code.
func fail(w io.Writer, name string, err error) int {
	return failf(w, name, exitCodeFor(err), "%v", err)
}

// failf prints a message and ends the command with code.
func failf(w io.Writer, name string, code int, format string, args ...any) int {
	warnf(w, name, format, args...)
	return code
}

// interrupted is the cause of a run's context canceled by a signal.
type interrupted struct{ sig syscall.Signal }

func (i interrupted) Error() string { return "stopped by " + i.sig.String() }

// signalCode is 128 + sig's number, as a shell reports it.
func signalCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok && s == syscall.SIGTERM {
		return ExitTerminated
	}
	return ExitInterrupted
}

// interruptedCode refines ExitInterrupted by ctx's cause (SIGTERM, stdout).
func interruptedCode(ctx context.Context, code int) int {
	var i interrupted
	switch cause := context.Cause(ctx); {
	case code != ExitInterrupted:
	case errors.As(cause, &i):
		return signalCode(i.sig)
	case isErr[stdoutFailed](cause):
		return ExitJournal
	}
	return code
}

// stdoutFailed cancels a run whose stdout failed: it stops as on a signal.
type stdoutFailed struct{ err error }

func (s stdoutFailed) Error() string { return "stdout: " + s.err.Error() }
func (s stdoutFailed) Unwrap() error { return s.err }

// stdoutFailure is the stdout error that stopped ctx's run, or nil.
func stdoutFailure(ctx context.Context) error {
	if s, ok := errors.AsType[stdoutFailed](context.Cause(ctx)); ok {
		return s.err
	}
	return nil
}

// catchBrokenPipe makes a closed pipe EPIPE, not death. Notify, not Ignore:
// exec's commands would inherit an ignored SIGPIPE.
var catchBrokenPipe = sync.OnceFunc(func() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
})

// stopOnFailure is stdout that cancels the run at its first failed write.
type stopOnFailure struct {
	w      io.Writer
	once   sync.Once
	stderr io.Writer
	name   string
	cancel context.CancelCauseFunc
}

func (s *stopOnFailure) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		s.once.Do(func() {
			warnf(s.stderr, s.name, "stdout: %v: stopping: finishing the calls in flight", err)
			s.cancel(stdoutFailed{err})
		})
	}
	return n, err
}

// done disarms it once the run is over: the command reports later errors.
func (s *stopOnFailure) done() { s.once.Do(func() {}) }

// signalContext is canceled by SIGINT, SIGTERM or a failed write to w; a
// second signal exits at once (the journal is consistent at every instant).
func signalContext(stderr io.Writer, name string, w io.Writer) (context.Context, *stopOnFailure, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	stdout := &stopOnFailure{w: w, stderr: stderr, name: name, cancel: cancel}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-done:
			return
		}
		warnf(stderr, name, "stopping: finishing the calls in flight (signal again to exit at once)")
		if s, ok := sig.(syscall.Signal); ok {
			cancel(interrupted{s})
		} else {
			cancel(nil)
		}
		select {
		case sig = <-sigs:
			warnf(stderr, name, "exiting at once")
			os.Exit(signalCode(sig))
		case <-done:
		}
	}()
	return ctx, stdout, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}
