package natsjs

import (
	"context"
	"time"
)

// Renewing this run's claims: every third of a lease, and at once when
// the connection comes back.

// renew tells the server that this run still works on each item it
// holds, and moves their deadlines once the server has had the word (a
// flush's round trip).
func (c *Checkpoint) renew() {
	start, margin := time.Now(), c.Margin()
	c.Mu.Lock()
	claims := make(map[*claim]bool, len(c.Held))
	var late []*claim
	for _, cl := range c.Held {
		if cl.msg.InProgress() != nil {
			continue
		}
		// A claim past its deadline (this run was paused, or a renewal
		// failed) may be another worker's now: its renewal is sent, and
		// its deadline moved only once the item's value shows it is
		// still this run's, as Holds does.
		if start.Before(cl.Deadline) {
			claims[cl] = true
		} else {
			late = append(late, cl)
		}
	}
	c.Mu.Unlock()
	if len(claims) == 0 && len(late) == 0 {
		return
	}
	if err := c.nc.FlushTimeout(margin / 3); err != nil {
		return // not renewed: the deadlines pass, and Holds asks the server
	}
	ctx, cancel := context.WithTimeout(context.Background(), margin/3)
	defer cancel()
	for _, cl := range late {
		c.Mu.Lock()
		rev, val := cl.rev, cl.val
		c.Mu.Unlock()
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
	c.Mu.Lock()
	for _, cl := range c.Held {
		if claims[cl] {
			cl.Deadline = start.Add(margin)
			if len(cl.payments) > 0 {
				beats = append(beats, locks{cl.lock, cl.payments})
			}
		}
	}
	c.Mu.Unlock()
	for _, b := range beats {
		c.beat(ctx, b.me, b.keys)
	}
}
