package sim

import (
	"net/http"
	"time"
)

// Post is a POST as the idempotency layer sees it.
type Post struct {
	// Scope is the key's scope (API credentials and key); "" when the
	// request carries no key, which then runs with nothing held or saved.
	Scope                string
	Method, Path, Params string        // what the key is bound to
	TTL                  time.Duration // how long the key is kept once done; 0 until Forget
	Now                  time.Time
	Seq                  uint64  // arrival number, for draws and latency
	F                    *Faults // the knobs in force when it arrived
	// MayTimeOut: a gateway timeout may answer it at once while it goes on
	// (refund creations).
	MayTimeOut bool
}

// Answer is an endpoint's outcome before it is written.
type Answer struct {
	Status int
	Body   []byte
	// Save: the endpoint ran, so the answer is saved under the key.
	// Validation errors are not saved: the key stays free.
	Save bool
	// Drop: close the connection instead of writing the answer.
	Drop bool
	// Gateway: a gateway's error reaches the client instead of the answer.
	Gateway bool
	// RequestID is the API's id of the request, saved with the answer;
	// Ref, what the request made (PayPal's refund id), saved with it.
	RequestID, Ref string
}

// PostAPI writes one API's answers for ServePost.
type PostAPI interface {
	// Known answers a request whose key is not new: a replay, a 409 while
	// the first request runs, a mismatch.
	Known(w http.ResponseWriter, v Verdict, saved KeyEntry)
	// Write writes the endpoint's answer.
	Write(w http.ResponseWriter, a Answer)
	// Gateway writes the gateway's own answer with status.
	Gateway(w http.ResponseWriter, status int)
}

// ServePost runs a POST through the idempotency layer into fn: a request
// with a key holds it while it runs (its latency included), and the answer
// fn saves is kept under it for every later request with the key. The
// gateway's faults stand in front: a timeout answers at once while the
// request goes on behind it, an error after commit replaces the answer.
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
	// The key is held from here: latency keeps it in flight. run may
	// outlive the handler, so it takes nothing from the request.
	run := func() Answer {
		c.Pause(p.F, p.Seq)
		a := fn()
		if held != nil {
			if a.Save {
				c.Keys.Finish(p.Scope, held, a.Status, a.Body, a.RequestID, a.Ref)
			} else {
				c.Keys.Abandon(p.Scope, held)
			}
		}
		return a
	}
	if p.MayTimeOut && c.Hit(p.F.GatewayTimeoutShare, p.Seq, KnobGatewayTimeout) {
		// The gateway gives up at once; the request goes on behind it.
		c.Count.GatewayTimeouts.Add(1)
		background := c.GoBackground(func() { run() })
		api.Gateway(w, p.F.GatewayStatusOr(http.StatusGatewayTimeout))
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
		api.Gateway(w, p.F.GatewayStatusOr(http.StatusBadGateway))
	default:
		api.Write(w, a)
	}
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

// AfterCommit is what becomes of a committed refund creation's answer.
type AfterCommit int

const (
	Answered     AfterCommit = iota // the answer goes out as it is
	Error500                        // the API answers 500 instead (saved under the key)
	GatewayError                    // a gateway's error replaces the saved success
	Dropped                         // the connection closes, the success saved
)

// AfterCommitFate draws what becomes of a committed creation's answer, and
// counts the API's own 500 (ServePost counts the gateway's and the drop).
func (c *Core) AfterCommitFate(f *Faults, seq uint64) AfterCommit {
	switch {
	case c.Hit(f.ErrorAfterCommitShare, seq, KnobErrorAfterCommit):
		c.Count.ErrorsAfter.Add(1)
		return Error500
	case c.Hit(f.GatewayErrorAfterCommitShare, seq, KnobGatewayErrorAfterCommit):
		return GatewayError
	case c.Hit(f.DropAfterCommitShare, seq, KnobDropAfterCommit):
		return Dropped
	}
	return Answered
}
