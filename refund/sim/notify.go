package sim

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// CheckLoopbackURL reports an error unless u is an http(s) loopback URL;
// what names u in the error, and sends what the simulator sends there.
func CheckLoopbackURL(what, sends, u string) error {
	p, err := url.Parse(u)
	if err != nil {
		return fmt.Errorf("%s %q: %v", what, u, err)
	}
	if p.Scheme != "http" && p.Scheme != "https" {
		return fmt.Errorf("%s %q: want http:// or https://", what, u)
	}
	host := p.Hostname()
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s %q: the simulator sends %s only to loopback (127.0.0.1, [::1] or localhost)", what, u, sends)
	}
	return nil
}

// NotifierConfig is how a Notifier posts; each API supplies its own.
type NotifierConfig struct {
	// URL receives every delivery (the API checks it is loopback).
	URL string
	// Workers post at once (0: 4).
	Workers int
	// Backoff is the wait before a delivery's first resend, doubling on
	// each later one up to MaxBackoff (0: 64 times Backoff).
	Backoff, MaxBackoff time.Duration
	// Accepted judges an answer by its status and first KiB of body.
	Accepted func(status int, body []byte) bool
}

// Delivery is one webhook message, posted until accepted (or once).
type Delivery struct {
	Due  time.Time
	Body []byte
	// Header sets an attempt's headers (a signature of its time, say).
	Header func(h http.Header)
	// Fail reports whether accepted attempt n (from 0) counts as failed
	// anyway, a knob's draw; nil: never.
	Fail func(attempt int) bool
	// Once posts it one time, whatever the answer: a forged delivery.
	Once bool
	// Done is told the delivery was accepted, or, Once, how its post fared.
	Done func(accepted bool)

	order    uint64
	attempts int
	next     *Delivery // queued once this one is accepted
}

// Forged is a delivery posted once that must not verify: body signed
// under a key the receiver lacks, or tampered after signing, its headers
// set by sign. A receiver that accepts it anyway is counted in accepted.
func Forged(due time.Time, body []byte, sign func(h http.Header), accepted *atomic.Int64) *Delivery {
	return &Delivery{Due: due, Body: body, Once: true, Header: sign,
		Done: func(ok bool) {
			if ok {
				accepted.Add(1)
			}
		}}
}

// Tamper changes what an event's body says of its refund: the first of
// swaps (a status for another) that it holds, else a field added.
func Tamper(body []byte, swaps ...[2]string) []byte {
	for _, sw := range swaps {
		if bytes.Contains(body, []byte(sw[0])) {
			return bytes.Replace(body, []byte(sw[0]), []byte(sw[1]), 1)
		}
	}
	return append(bytes.TrimSuffix(body, []byte("}")), []byte(`,"tampered":true}`)...)
}

// Notifier is a webhook's sender: deliveries queued by due time, handed
// to workers, each posted until a receiver accepts it, with backoff. A
// chain of deliveries goes out one after the other; chains side by side.
type Notifier struct {
	cfg    NotifierConfig
	client *http.Client

	mu      sync.Mutex
	queue   []*Delivery // by due time, then arrival
	order   uint64      // arrival order in the queue, for equal due times
	pending Gauge       // deliveries queued or in flight, later ones of a chain included
	closed  bool

	wake      chan struct{} // a delivery was queued: the dispatcher looks again
	ready     chan *Delivery
	stop      chan struct{}
	ctx       context.Context // canceled by Close: posts in flight end
	cancel    context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup

	queued, delivered, retries, failedByKnob atomic.Int64
}

// NotifyCounts are a Notifier's counts of deliveries that are not Once.
type NotifyCounts struct {
	Queued, Delivered, Retries, FailedByKnob int64
	// Pending are queued, waiting for the one before, or in flight (Once
	// ones included).
	Pending int64
}

// NewNotifier starts a notifier's dispatcher and workers.
func NewNotifier(cfg NotifierConfig) *Notifier {
	cfg.Workers = cmp.Or(cfg.Workers, 4)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, cfg.Backoff<<6)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = cfg.Workers
	n := &Notifier{cfg: cfg, client: &http.Client{Transport: transport, Timeout: 10 * time.Second},
		wake: make(chan struct{}, 1), ready: make(chan *Delivery), stop: make(chan struct{})}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(1 + cfg.Workers)
	go n.dispatch()
	for range cfg.Workers {
		go n.work()
	}
	return n
}

// Enqueue queues a chain: each delivery once the one before is accepted,
// not before its own due time. Once deliveries do not count as queued.
func (n *Notifier) Enqueue(chain ...*Delivery) {
	if len(chain) == 0 {
		return
	}
	for i := range len(chain) - 1 {
		chain[i].next = chain[i+1]
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.pending.Add(int64(len(chain)))
	n.mu.Unlock()
	for _, d := range chain {
		if !d.Once {
			n.queued.Add(1)
		}
	}
	n.push(chain[0])
}

// push queues d by its due time.
func (n *Notifier) push(d *Delivery) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	d.order = n.order
	n.order++
	i, _ := slices.BinarySearchFunc(n.queue, d, func(a, b *Delivery) int {
		return cmp.Or(a.Due.Compare(b.Due), cmp.Compare(a.order, b.order))
	})
	n.queue = slices.Insert(n.queue, i, d)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// dispatch hands the deliveries to the workers as they fall due.
func (n *Notifier) dispatch() {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		var d *Delivery
		wait := time.Duration(-1)
		if len(n.queue) > 0 {
			if w := time.Until(n.queue[0].Due); w <= 0 {
				d, n.queue[0], n.queue = n.queue[0], nil, n.queue[1:]
			} else {
				wait = w
			}
		}
		n.mu.Unlock()
		if d != nil {
			select {
			case n.ready <- d:
			case <-n.stop:
				return
			}
			continue
		}
		if !Sleep(wait, n.wake, n.stop) {
			return
		}
	}
}

// Sleep waits wait (-1: no end), or until wake or stop; false once stop
// is closed.
func Sleep(wait time.Duration, wake, stop <-chan struct{}) bool {
	var fire <-chan time.Time
	if wait >= 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		fire = timer.C
	}
	select {
	case <-wake:
	case <-fire:
	case <-stop:
	}
	select {
	case <-stop:
		return false
	default:
		return true
	}
}

func (n *Notifier) work() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case d := <-n.ready:
			n.attempt(d)
		}
	}
}

// attempt posts d once: accepted, the next is queued; else d, after backoff.
func (n *Notifier) attempt(d *Delivery) {
	ok := n.post(d)
	if n.ctx.Err() != nil {
		return // closing: d stays pending
	}
	if d.Once {
		if d.Done != nil {
			d.Done(ok)
		}
		n.pending.Add(-1)
		return
	}
	if ok && d.Fail != nil && d.Fail(d.attempts) {
		n.failedByKnob.Add(1)
		ok = false
	}
	d.attempts++
	if !ok {
		n.retries.Add(1)
		d.Due = time.Now().Add(n.backoff(d.attempts))
		n.push(d)
		return
	}
	n.delivered.Add(1)
	if d.Done != nil {
		d.Done(true)
	}
	if nx := d.next; nx != nil {
		if now := time.Now(); nx.Due.Before(now) {
			nx.Due = now
		}
		n.push(nx)
	}
	n.pending.Add(-1)
}

// backoff is the wait after a delivery's attempts-th failure.
func (n *Notifier) backoff(attempts int) time.Duration {
	w := n.cfg.Backoff << min(attempts-1, 30) // 30: past the cap long before it overflows
	if w <= 0 || w > n.cfg.MaxBackoff {
		return n.cfg.MaxBackoff
	}
	return w
}

// post sends d and reports whether the receiver accepted it.
func (n *Notifier) post(d *Delivery) bool {
	req, err := http.NewRequestWithContext(n.ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(d.Body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	if d.Header != nil {
		d.Header(req.Header)
	}
	res, err := n.client.Do(req)
	if err != nil {
		return false
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1024))
	return err == nil && n.cfg.Accepted(res.StatusCode, b)
}

// Flush waits until no delivery is pending, or ctx ends.
func (n *Notifier) Flush(ctx context.Context) error { return n.pending.Wait(ctx) }

// Close stops the dispatcher and the workers, cutting posts in flight;
// deliveries not yet accepted stay pending.
func (n *Notifier) Close() {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		n.mu.Unlock()
		close(n.stop)
		n.cancel()
		n.wg.Wait()
		n.client.CloseIdleConnections()
	})
}

// Counts returns the counts so far.
func (n *Notifier) Counts() NotifyCounts {
	return NotifyCounts{Queued: n.queued.Load(), Delivered: n.delivered.Load(), Retries: n.retries.Load(),
		FailedByKnob: n.failedByKnob.Load(), Pending: n.pending.N()}
}
