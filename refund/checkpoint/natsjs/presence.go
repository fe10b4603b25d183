package natsjs

// Which workers of a batch are alive: each says so by a message of its own
// that the server forgets a lease after it was sent (a per-message TTL,
// nats-server 2.11 and later), sent again every third of a lease.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/refund"
)

func presenceStream(name string) string  { return "refundkit_" + name + "_workers" }
func presenceSubject(name string) string { return "refundkit." + name + ".workers" }

// batchPresence is the subject under which worker says it works on batch.
func (c *Checkpoint) batchPresence(batch, worker string) string {
	return presenceSubject(c.loc.name) + ".batch." + token(batch) + "." + token(worker)
}

// minServer is the oldest nats-server with per-message TTLs.
const minServer = "2.11.0"

// openPresence opens (or makes) the stream of the workers' presences.
func (c *Checkpoint) openPresence(ctx context.Context) error {
	if v := c.nc.ConnectedServerVersion(); !atLeast(v, minServer) {
		return &DurabilityError{URL: c.loc.redacted, Why: fmt.Sprintf("the server is nats-server %s: refundkit needs %s or later (per-message TTLs tell it which workers are alive)", v, minServer)}
	}
	cfg := jetstream.StreamConfig{
		Name:              presenceStream(c.loc.name),
		Description:       "refundkit checkpoint " + c.loc.name + ": the live workers",
		Subjects:          []string{presenceSubject(c.loc.name) + ".>"},
		Storage:           jetstream.FileStorage,
		Replicas:          c.loc.replicas,
		MaxMsgsPerSubject: 1,
		AllowMsgTTL:       true,
	}
	s, err := c.js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = c.js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = c.js.Stream(ctx, cfg.Name)
		}
	}
	if err != nil {
		return c.Wrap("open presence stream", err)
	}
	if !s.CachedInfo().Config.AllowMsgTTL {
		return &DurabilityError{URL: c.loc.redacted, Why: fmt.Sprintf("the stream %s does not allow per-message TTLs (made by something other than refundkit?)", cfg.Name)}
	}
	c.Mu.Lock()
	c.presence = s
	c.Mu.Unlock()
	return nil
}

// checkName refuses a name a live worker of any batch holds: it would take
// this one's claims and presence for its own (as PostgreSQL refuses it).
func (c *Checkpoint) checkName(ctx context.Context) error {
	info, err := c.presenceNow().Info(ctx, jetstream.WithSubjectFilter(presenceSubject(c.loc.name)+".batch.*."+token(c.Worker)))
	if err != nil {
		return c.Wrap("open presence stream", err)
	}
	if len(info.State.Subjects) > 0 {
		return &refund.WorkerNameError{Worker: c.Worker}
	}
	return nil
}

// queues is the batches this run works on, as Load last set them.
func (c *Checkpoint) queues() []*batchQueue {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.batches
}

// presenceNow is the stream of presences as last opened.
func (c *Checkpoint) presenceNow() jetstream.Stream {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.presence
}

// sayAlive tells the batches' other workers that this one works on them,
// for a lease from now.
func (c *Checkpoint) sayAlive(ctx context.Context) {
	queues := c.queues()
	ttl := max(c.Lease(), time.Second) // the server's least TTL
	for _, q := range queues {
		_, err := c.js.Publish(ctx, c.batchPresence(q.batch, c.Worker), c.heldIn(q.batch), jetstream.WithMsgTTL(ttl))
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			// The stream was deleted (by hand): make it again, and say
			// so at the next beat.
			c.openPresence(ctx)
			return
		}
	}
}

// presenceBody is what a worker's presence in a batch says besides that it is
// alive: the claims it holds there, item by item with their generations.
type presenceBody struct {
	Claims map[string]int64 `json:"claims,omitempty"`
}

// heldIn is this worker's presence body in batch.
func (c *Checkpoint) heldIn(batch string) []byte {
	body := presenceBody{Claims: map[string]int64{}}
	c.Mu.Lock()
	for k, cl := range c.Held {
		if k.Batch == batch {
			body.Claims[k.Item] = cl.val.Gen
		}
	}
	c.Mu.Unlock()
	b, _ := json.Marshal(&body)
	return b
}

// holdsLive reports whether worker is alive and may hold its claim gen of
// the item, written at claimed: it says so, or has not beaten since.
func (c *Checkpoint) holdsLive(ctx context.Context, batch, item, worker string, gen int64, claimed time.Time) (bool, error) {
	msg, err := c.presenceNow().GetLastMsgForSubject(ctx, c.batchPresence(batch, worker))
	if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var body presenceBody
	if json.Unmarshal(msg.Data, &body) != nil {
		return false, nil // an older worker's: it says nothing of its claims
	}
	g, ok := body.Claims[item]
	return ok && g == gen || claimed.After(msg.Time), nil
}

// sayGone takes this worker's presences back: it ends.
func (c *Checkpoint) sayGone(ctx context.Context) {
	queues := c.queues()
	for _, q := range queues {
		c.presenceNow().Purge(ctx, jetstream.WithPurgeSubject(c.batchPresence(q.batch, c.Worker)))
	}
}

// liveWorkers is the workers of batch that said they are alive within a
// lease, this one included once it said so.
func (c *Checkpoint) liveWorkers(ctx context.Context, batch string) (map[string]bool, error) {
	prefix := presenceSubject(c.loc.name) + ".batch." + token(batch) + "."
	info, err := c.presenceNow().Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// Deleted by hand: made again, and who is alive unknown until
		// the workers' next beats; nil says so.
		return nil, c.openPresence(ctx)
	}
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for subject := range info.State.Subjects {
		if w, err := untoken(strings.TrimPrefix(subject, prefix)); err == nil {
			live[w] = true
		}
	}
	return live, nil
}

// atLeast compares dotted versions ("2.15.2" and "2.11.0"); a version
// that does not parse is not.
func atLeast(v, least string) bool {
	v, _, _ = strings.Cut(v, "-")
	a, b := strings.Split(v, "."), strings.Split(least, ".")
	for i := range b {
		if i >= len(a) {
			return false
		}
		x, err := strconv.Atoi(a[i])
		y, _ := strconv.Atoi(b[i])
		if err != nil {
			return false
		}
		if x != y {
			return x > y
		}
	}
	return true
}
