package sim

import (
	"cmp"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// Post is a POST as the idempotency layer sees it.
type Post struct {
	// Scope is the key's scope; "" without a key: nothing held or saved.
	Scope                string
	Method, Path, Params string        // what the key is bound to
	TTL                  time.Duration // how long the key is kept once done; 0 until Forget
	Now                  time.Time
	Seq                  uint64  // arrival number, for draws and latency
	F                    *Faults // the knobs in force when it arrived
	// MayTimeOut: a gateway timeout may answer it (refund creations).
	MayTimeOut bool
}

// PostAPI writes one API's answers for ServePost.
type PostAPI interface {
	// Known answers a request whose key is not new.
	Known(w http.ResponseWriter, v Verdict, saved KeyEntry)
	// Write writes the endpoint's answer.
	Write(w http.ResponseWriter, a Answer)
	// GatewayBody is a gateway's answer in the API's error shape.
	GatewayBody(status int) []byte
}

// ServePost runs a POST through the idempotency layer into fn: a key is
// held while it runs, latency included, and keeps the answer fn saves. The
// gateway stands in front: a timeout answers at once while the request
// goes on behind it; an error after commit replaces the answer.
func (c *Core) ServePost(w http.ResponseWriter, p Post, api PostAPI, fn func() Answer) {
	var held *KeyEntry
	if p.Scope != "" {
		saved, e, v := c.Keys.Begin(p.Scope, p.Method, p.Path, p.Params, p.Now, p.TTL)
		if v != KeyNew {
			c.Pause(p.F, p.Seq)
			api.Known(w, v, saved)
			return
		}
		held = e
	}
	// run may outlive the handler, so it takes nothing from the request.
	run := func() Answer {
		c.Pause(p.F, p.Seq)
		a := fn()
		c.CountInvalid(a)
		if held != nil {
			if a.Save {
				c.Keys.Finish(p.Scope, held, a.Status, a.Body, a.RequestID, a.Ref)
			} else {
				c.Keys.Abandon(p.Scope, held)
			}
		}
		return a
	}
	gateway := func(status int) {
		var body []byte
		if p.F.GatewayStripeBody {
			body = api.GatewayBody(status)
		}
		WriteGatewayAnswer(w, status, body)
	}
	if p.MayTimeOut && c.Hit(p.F.GatewayTimeoutShare, p.Seq, KnobGatewayTimeout) {
		c.Count.GatewayTimeouts.Add(1)
		background := c.GoBackground(func() { run() })
		gateway(cmp.Or(p.F.GatewayStatus, http.StatusGatewayTimeout))
		if !background { // the simulator is closing: finish it here
			run()
		}
		return
	}
	a := run()
	switch {
	case a.Drop:
		c.Count.Dropped.Add(1)
		DropConnection(w)
	case a.Gateway:
		c.Count.GatewayErrorsAfter.Add(1)
		gateway(cmp.Or(p.F.GatewayStatus, http.StatusBadGateway))
	default:
		api.Write(w, a)
	}
}

// CountInvalid counts a validation error: a 400 the key does not keep.
func (c *Core) CountInvalid(a Answer) {
	if a.Status == http.StatusBadRequest && !a.Save {
		c.Count.InvalidRequests.Add(1)
	}
}

// Scope is the key store's scope of key under prefix, "" without a key.
func Scope(prefix, key string) string {
	if key == "" {
		return ""
	}
	return prefix + key
}

// ReadBody reads a request body of at most max bytes.
func ReadBody(r *http.Request, max int) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(max)+1))
	return body, err == nil && len(body) <= max
}

// RateLimited reports (and counts) whether request seq is drawn for a 429,
// which it gets after its latency.
func (c *Core) RateLimited(f *Faults, seq uint64) bool {
	if !c.Hit(f.RateLimitShare, seq, KnobRateLimit) {
		return false
	}
	c.Count.RateLimited.Add(1)
	c.Pause(f, seq)
	return true
}

// FailBeforeCommit reports (and counts) whether a refund creation is
// answered 500 before anything is committed.
func (c *Core) FailBeforeCommit(f *Faults, seq uint64) bool {
	if c.Hit(f.ErrorBeforeCommitShare, seq, KnobErrorBeforeCommit) {
		c.Count.ErrorsBefore.Add(1)
		return true
	}
	return false
}

// Refused counts a creation refused for the payment's state, and is a.
func (c *Core) Refused(a Answer) Answer {
	c.Count.RefundsRefused.Add(1)
	return a
}

// AfterCommit counts a refund made and draws what becomes of its answer
// a: the API's 500 internal (saved, with a's Ref), a gateway's error, a
// dropped connection, or a as it is.
func (c *Core) AfterCommit(f *Faults, seq uint64, a, internal Answer) Answer {
	c.Count.RefundsCreated.Add(1)
	switch {
	case c.Hit(f.ErrorAfterCommitShare, seq, KnobErrorAfterCommit):
		c.Count.ErrorsAfter.Add(1)
		internal.Save, internal.Ref = true, a.Ref
		return internal
	case c.Hit(f.GatewayErrorAfterCommitShare, seq, KnobGatewayErrorAfterCommit):
		a.Gateway = true
	case c.Hit(f.DropAfterCommitShare, seq, KnobDropAfterCommit):
		a.Drop = true
	}
	return a
}

// Hook is a test's create hook, called with the key held before a commit.
type Hook struct{ fn atomic.Pointer[func(string)] }

// Set makes fn the hook; nil removes it.
func (h *Hook) Set(fn func(string)) {
	if fn == nil {
		h.fn.Store(nil)
		return
	}
	h.fn.Store(&fn)
}

// Call calls the hook, if any, with key.
func (h *Hook) Call(key string) {
	if fn := h.fn.Load(); fn != nil {
		(*fn)(key)
	}
}
