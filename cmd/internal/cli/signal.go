package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
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

// interruptedCode is the exit code of a run that stopped on a signal
// (code ExitInterrupted: its error is the context's): ExitTerminated
// when that signal was SIGTERM.
func interruptedCode(ctx context.Context, code int) int {
	var i interrupted
	if code == ExitInterrupted && errors.As(context.Cause(ctx), &i) {
		return signalCode(i.sig)
	}
	return code
}

// signalContext is canceled by the first SIGINT or SIGTERM, so the run stops
// taking new items and finishes what it sent; a second signal exits at once
// (the journal is consistent at every instant, so that is safe too).
func signalContext(stderr io.Writer, name string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
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
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}
