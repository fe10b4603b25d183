package natsjs

import (
	"context"
	"time"
)

// Renewing this run's claims: every third of a lease, and at once when
// the connection comes back.

// renewLoop tells the server every third of a lease that this run still
// works on each item it holds, and moves their deadlines once the server
// has had the word (a flush's round trip), until Close.
func (c *Checkpoint) renewLoop() {
	defer close(c.renewDone)
	t := time.NewTicker(c.leaseNow() / 3)
	defer t.Stop()
	for {
		select {
		case <-c.stopRenew:
			return
		case <-c.leaseCut:
			// A queue's ack-wait is shorter than --lease: renew what is
			// held now, and every third of the ack-wait after.
			t.Reset(c.leaseNow() / 3)
			c.renew()
		case <-c.relinked:
			c.renew()
		case <-t.C:
			c.renew()
			ctx, cancel := context.WithTimeout(context.Background(), c.margin()/3)
			c.sayAlive(ctx)
			cancel()
		}
	}
}

func (c *Checkpoint) renew() {
	start, margin := time.Now(), c.margin()
	c.mu.Lock()
	claims := make(map[*claim]bool, len(c.held))
	var late []*claim
	for _, cl := range c.held {
		if cl.msg.InProgress() != nil {
			continue
		}
		// A claim past its deadline (this run was paused, or a renewal
		// failed) may be another worker's now: its renewal is sent, and
		// its deadline moved only once the item's value shows it is
		// still this run's, as Holds does.
		if start.Before(cl.deadline) {
			claims[cl] = true
		} else {
			late = append(late, cl)
		}
	}
	c.mu.Unlock()
	if len(claims) == 0 && len(late) == 0 {
		return
	}
	if err := c.nc.FlushTimeout(margin / 3); err != nil {
		return // not renewed: the deadlines pass, and Holds asks the server
	}
	ctx, cancel := context.WithTimeout(context.Background(), margin/3)
	defer cancel()
	for _, cl := range late {
		c.mu.Lock()
		rev, val := cl.rev, cl.val
		c.mu.Unlock()
		e, err := c.kv.Get(ctx, itemKey(val.Batch, val.Item))
		if err == nil && e.Revision() == rev {
			claims[cl] = true // a late renewal, of a claim no one took
		}
	}
	type locks struct {
		me   lockValue
		keys []string
	}
	var beats []locks
	c.mu.Lock()
	for _, cl := range c.held {
		if claims[cl] {
			cl.deadline = start.Add(margin)
			if len(cl.payments) > 0 {
				beats = append(beats, locks{cl.lock, cl.payments})
			}
		}
	}
	c.mu.Unlock()
	for _, b := range beats {
		c.beat(ctx, b.me, b.keys)
	}
}
