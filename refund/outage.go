package refund

import (
	"fmt"
	"sync"
	"time"
)

// Outage says, once as it begins and once as it ends, that a shared
// checkpoint does not answer: its workers retry while their claims'
// leases last (refund/checkpoint/postgres and natsjs, each with its own
// test of what failed). The zero value needs only its fields set.
type Outage struct {
	Silent string // "the database does not answer": said as it begins
	Back   string // "the database answers again": said as it ends
	Warn   func(msg string)

	mu    sync.Mutex
	since time.Time // when the first operation failed (zero: none is failing)
}

// Unanswered notes that an operation failed with err because the
// checkpoint did not answer; lease is how long the worker's claims last
// (said with it), secrets are scrubbed from err.
func (o *Outage) Unanswered(err error, lease time.Duration, secrets ...string) {
	o.mu.Lock()
	first := o.since.IsZero()
	if first {
		o.since = time.Now()
	}
	o.mu.Unlock()
	if first {
		o.Warn(fmt.Sprintf("%s (%v): this worker tries again while the leases of its claims last (%s)", o.Silent, Scrub(err, secrets...), lease))
	}
}

// Answered notes that the checkpoint answered, and reports whether that
// ended an outage.
func (o *Outage) Answered() bool {
	o.mu.Lock()
	since := o.since
	o.since = time.Time{}
	o.mu.Unlock()
	if since.IsZero() {
		return false
	}
	o.Warn(fmt.Sprintf("%s after %s: this worker goes on with the claims it holds", o.Back, time.Since(since).Round(time.Millisecond)))
	return true
}
