package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
)

// openCheckpoint opens refund's checkpoint: the journal file, locked (read
// only in a dry run), the PostgreSQL checkpoint at a postgres:// URL or the
// NATS JetStream one at a nats:// URL. close gives it up.
func (c *refundCmd) openCheckpoint(ctx context.Context, msgs io.Writer, name string) (refund.Checkpoint, func(), error) {
	if natsjs.IsURL(c.Journal) {
		cp, err := natsjs.Open(ctx, c.Journal, natsjs.Options{Lease: c.Lease, Worker: c.Worker, RetryHeld: c.AllowRefunded,
			Warn: func(msg string) { warnf(msgs, name, "%s", msg) }}, c.DryRun)
		if err != nil {
			return nil, nil, err
		}
		return cp, func() { cp.Close() }, nil
	}
	if postgres.IsURL(c.Journal) {
		if c.Lease < time.Second {
			return nil, nil, withCode(ExitUsage, fmt.Errorf("--lease %s: want 1s or more", c.Lease))
		}
		cp, err := postgres.Open(ctx, c.Journal, postgres.Options{Lease: c.Lease, Worker: c.Worker,
			Warn: func(msg string) { warnf(msgs, name, "%s", msg) }}, c.DryRun)
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
		state, torn, err = loadForDryRun(c.Journal)
	} else {
		w, state, torn, err = journal.Open(c.Journal, journal.Options{NoGroupCommit: c.NoGroupCommit})
	}
	if err != nil {
		return nil, nil, err
	}
	if torn != nil {
		warnf(msgs, name, "%s", torn)
	}
	return refund.Journal(w, state), func() {
		if w != nil {
			w.Close()
		}
	}, nil
}

// isShared reports a --journal argument that names a checkpoint many runs
// share (PostgreSQL, NATS JetStream) rather than a journal file.
func isShared(journal string) bool { return postgres.IsURL(journal) || natsjs.IsURL(journal) }

// redactCheckpoint names a checkpoint in messages: a URL without its
// password, or the file's path.
func redactCheckpoint(journal string) string {
	switch {
	case postgres.IsURL(journal):
		return postgres.Redact(journal)
	case natsjs.IsURL(journal):
		return natsjs.Redact(journal)
	}
	return journal
}
