package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// interrupted is the cause of a run's context canceled by a signal: the
// run ends with the shell's code for it, 128 + the signal's number.
type interrupted struct{ sig syscall.Signal }

func (i interrupted) Error() string { return "stopped by " + i.sig.String() }

// signalCode is the exit code of a process that stopped because of sig:
// 130 for SIGINT, 143 for SIGTERM, as a shell reports a process the
// signal killed, so a supervisor reads one meaning whichever way it ended.
func signalCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok && s == syscall.SIGTERM {
		return ExitTerminated
	}
	return ExitInterrupted
}

// interruptedCode is the exit code of a run that stopped early (code
// ExitInterrupted: its error is the context's): ExitTerminated when the
// signal was SIGTERM, ExitJournal when stdout failed.
func interruptedCode(ctx context.Context, code int) int {
	var i interrupted
	switch cause := context.Cause(ctx); {
	case code != ExitInterrupted:
	case errors.As(cause, &i):
		return signalCode(i.sig)
	case errors.As(cause, new(stdoutFailed)):
		return ExitJournal
	}
	return code
}

// stdoutFailed is the cause of a run's context canceled because stdout
// could not be written: a closed pipe (`| head -1`) or a full disk. What
// the run would print can no longer be delivered, so it stops as on a
// first signal, and ends with exit 3, an output that cannot be written.
type stdoutFailed struct{ err error }

func (s stdoutFailed) Error() string { return "stdout: " + s.err.Error() }
func (s stdoutFailed) Unwrap() error { return s.err }

// stdoutFailure is the error writing stdout that stopped the run of ctx,
// nil if none did.
func stdoutFailure(ctx context.Context) error {
	var s stdoutFailed
	if errors.As(context.Cause(ctx), &s) {
		return s.err
	}
	return nil
}

// catchBrokenPipe makes a write to a pipe whose reader is gone fail with
// EPIPE, as any other failed write does, where Go's runtime would kill the
// process with SIGPIPE for fds 1 and 2 (exit 141 in a shell, calls in
// flight unjournaled, no summary): the command then takes its path for a
// stdout that cannot be written. Notify, not Ignore: an ignored SIGPIPE
// would stay ignored in the commands the exec provider runs.
var catchBrokenPipe = sync.OnceFunc(func() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
})

// stopOnFailure is stdout for a run that stops at its first failed write:
// it says so and cancels the run with stdoutFailed, so nothing new is
// begun and the calls in flight finish and are journaled, as on a signal.
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

// done disarms it once the run is over: a failure then is only the
// writer's error, which the command reports.
func (s *stopOnFailure) done() { s.once.Do(func() {}) }

// signalContext is canceled by the first SIGINT or SIGTERM, so the run stops
// taking new items and finishes what it sent; a second signal exits at once
// (the journal is consistent at every instant, so that is safe too).
// Writes to its stdout, which wraps w, stop the run the same way when they
// fail.
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
