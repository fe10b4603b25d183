package cli

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// signalContext is canceled by the first SIGINT or SIGTERM, so the run stops
// taking new items and finishes what it sent; a second signal exits at once
// (the journal is consistent at every instant, so that is safe too).
func signalContext(stderr io.Writer, name string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
		case <-done:
			return
		}
		warnf(stderr, name, "stopping: finishing the calls in flight (signal again to exit at once)")
		cancel()
		select {
		case <-sigs:
			warnf(stderr, name, "exiting at once")
			os.Exit(ExitInterrupted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}
