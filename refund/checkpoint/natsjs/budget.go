package natsjs

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/refund/checkpoint"
)

// Budget is this worker's part of its account's budget, as postgres.Budget:
// re-split when a worker joins, ends, dies or has no claim left; until Close.
type Budget struct {
	checkpoint.Share // idle: its presence is taken back
	c                *Checkpoint
	prefix           string // the account's presence subjects, with a trailing dot
	me               string // this worker's
	notice           string // where a worker that goes idle or ends says so
	subs             []*nats.Subscription
	heard            chan struct{}
	ctx              context.Context
	done             chan struct{}
}

// ShareBudget makes this worker one of the live workers of account (an
// identity of the provider account, never a secret) that share its limits.
func (c *Checkpoint) ShareBudget(ctx context.Context, account string, apply func(workers int)) (*Budget, error) {
	if c.presenceNow() == nil {
		return nil, newError("budget", errors.New("a budget needs a worker (opened read only)"))
	}
	prefix := presenceSubject(c.loc.name) + ".account." + token(account) + "."
	b := &Budget{c: c, prefix: prefix, me: prefix + token(c.Worker), notice: "refundkit." + c.loc.name + ".idle." + token(account),
		heard: make(chan struct{}, 1), done: make(chan struct{})}
	b.ctx = b.Begin(apply)
	// Subscribe before joining: a worker that joins after this one counts
	// is heard, one that joined before is counted.
	for _, subject := range []string{prefix + ">", b.notice} {
		sub, err := c.nc.Subscribe(subject, func(*nats.Msg) { checkpoint.Signal(b.heard) })
		if err != nil {
			b.end(false)
			return nil, c.Wrap("budget", err)
		}
		b.subs = append(b.subs, sub)
	}
	if err := b.sayAlive(ctx); err != nil {
		b.end(false)
		return nil, c.Wrap("budget", err)
	}
	if err := b.recount(ctx); err != nil {
		b.end(false)
		return nil, c.Wrap("budget", err)
	}
	c.Mu.Lock()
	c.budget = b
	c.Mu.Unlock()
	go b.loop()
	return b, nil
}

func (b *Budget) sayAlive(ctx context.Context) error {
	_, err := b.c.js.Publish(ctx, b.me, nil, jetstream.WithMsgTTL(max(b.c.Lease(), time.Second)))
	return err
}

// sayIdle takes this worker's presence back: the others share without it.
func (b *Budget) sayIdle(ctx context.Context) error {
	if err := b.c.presenceNow().Purge(ctx, jetstream.WithPurgeSubject(b.me)); err != nil {
		return err
	}
	// The purge is no message the others hear: tell them, outside the
	// stream (a message under prefix would be kept as a worker's).
	return b.c.nc.Publish(b.notice, nil)
}

// recount counts the account's live workers, this one always included,
// and applies their number when it changed.
func (b *Budget) recount(ctx context.Context) error {
	info, err := b.c.presenceNow().Info(ctx, jetstream.WithSubjectFilter(b.prefix+">"))
	if err != nil {
		return err
	}
	n := 1
	for subject := range info.State.Subjects {
		if subject != b.me {
			n++
		}
	}
	b.Counted(n)
	return nil
}

// loop says this worker is alive every third of a lease while it holds
// claims (or has not worked yet), takes its presence back while it holds
// none, and counts again when it hears another or every sixth of a lease.
func (b *Budget) loop() {
	defer close(b.done)
	c := b.c
	tick := time.NewTicker(checkpoint.IdleAfter / 5)
	defer tick.Stop()
	said, counted := time.Now(), time.Now()
	var w checkpoint.Idle
	for {
		heard := false
		select {
		case <-b.ctx.Done():
			return
		case <-b.heard:
			heard = true
		case <-tick.C:
		}
		now := time.Now()
		held, worked := c.Activity()
		idle := b.Idle()
		ctx, cancel := context.WithTimeout(b.ctx, max(c.Lease()/6, 100*time.Millisecond))
		switch w.Step(now, held, worked, idle) {
		case checkpoint.Holding:
			if idle || now.Sub(said) >= c.Lease()/3 {
				if b.sayAlive(ctx) == nil {
					said = now
					b.SetIdle(false)
				}
			}
		case checkpoint.GoIdle:
			if b.sayIdle(ctx) == nil {
				b.SetIdle(true)
			}
		case checkpoint.Same:
			// Not worked yet: it keeps its part, so that none sends
			// before the others count it.
			if !idle && now.Sub(said) >= c.Lease()/3 && b.sayAlive(ctx) == nil {
				said = now
			}
		}
		if heard || now.Sub(counted) >= c.Lease()/6 {
			if b.recount(ctx) == nil {
				counted = now
			}
		}
		cancel()
	}
}

// end stops the loop, if it started, and takes this worker's presence
// back.
func (b *Budget) end(started bool) {
	if b == nil {
		return
	}
	b.End(func() {
		for _, sub := range b.subs {
			sub.Unsubscribe()
		}
		if started {
			<-b.done
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.c.Margin()/3)
		defer cancel()
		b.sayIdle(ctx)
	})
}
