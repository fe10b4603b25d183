package adyensim

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

// notifyWorkers is how many notifications are posted at once.
const notifyWorkers = 4

// notifier is Adyen's side of the webhook: signed notifications, each
// posted until accepted, with backoff. A refund's go out one after the
// other, in the order they are due; different refunds' side by side.
type notifier struct {
	core    *sim.Core
	url     string
	key     []byte
	backoff time.Duration
	client  *http.Client
	told    func(*wire.Item) // a receiver accepted the item

	mu      sync.Mutex
	queue   []*delivery // by due time, then arrival
	order   uint64      // arrival order in the queue, for equal due times
	pending sim.Gauge   // deliveries queued or in flight, later ones of a refund included
	closed  bool

	wake      chan struct{} // a delivery was queued: the dispatcher looks again
	ready     chan *delivery
	stop      chan struct{}
	ctx       context.Context // canceled by close: posts in flight end
	cancel    context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup

	queued, delivered, retries, duplicates, failedByKnob atomic.Int64
}

// delivery is one notification to post, and how it has fared.
type delivery struct {
	due      time.Time
	order    uint64
	item     wire.Item // signed
	body     []byte
	n        int // the refund's number
	pos      int // its place in the refund's sending order
	copy     int // 1 for the duplicate of a notification
	attempts int
	next     *delivery // queued once this one is accepted
}

// CheckNotifyURL reports an error unless u is an http(s) loopback URL.
func CheckNotifyURL(u string) error {
	p, err := url.Parse(u)
	if err != nil {
		return fmt.Errorf("notify url %q: %v", u, err)
	}
	if p.Scheme != "http" && p.Scheme != "https" {
		return fmt.Errorf("notify url %q: want http:// or https://", u)
	}
	host := p.Hostname()
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("notify url %q: the simulator sends notifications only to loopback (127.0.0.1, [::1] or localhost)", u)
	}
	return nil
}

func newNotifier(core *sim.Core, u string, key []byte, backoff time.Duration, told func(*wire.Item)) (*notifier, error) {
	if err := CheckNotifyURL(u); err != nil {
		return nil, err
	}
	if len(key) == 0 {
		return nil, errors.New("adyen notifications need an HMAC key to sign them")
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = notifyWorkers
	n := &notifier{core: core, url: u, key: key, backoff: cmp.Or(backoff, DefaultNotifyBackoff), told: told,
		client: &http.Client{Transport: transport, Timeout: 10 * time.Second},
		wake:   make(chan struct{}, 1), ready: make(chan *delivery), stop: make(chan struct{})}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(1 + notifyWorkers)
	go n.dispatch()
	for range notifyWorkers {
		go n.work()
	}
	return n, nil
}

// drawSeq numbers a delivery attempt for the draws, not by timing.
func drawSeq(n, pos, copy, attempt int) uint64 {
	return uint64(n)<<24 | uint64(pos&0xf)<<20 | uint64(copy&1)<<19 | uint64(attempt&0x7ffff)
}

// enqueue queues refund n's items, in order, under the knobs f that made it.
func (n *notifier) enqueue(num int, items []wire.Item, f *sim.Faults) {
	if f.AdyenNotifyReorder && len(items) == 2 {
		items = []wire.Item{items[1], items[0]}
	}
	due := time.Now()
	var chain []*delivery
	for pos := range items {
		it := items[pos]
		wire.SetSignature(&it, n.key)
		due = due.Add(f.AdyenNotifyDelay)
		if f.AdyenNotifyJitter > 0 {
			due = due.Add(time.Duration(n.core.Draw(drawSeq(num, pos, 0, 0), sim.KnobAdyenNotifyJitter) * float64(f.AdyenNotifyJitter)))
		}
		req := wire.Request{Live: "false"}
		req.NotificationItems = make([]struct {
			NotificationRequestItem wire.Item `json:"NotificationRequestItem"`
		}, 1)
		req.NotificationItems[0].NotificationRequestItem = it
		body := sim.MustJSON(req)
		chain = append(chain, &delivery{due: due, item: it, body: body, n: num, pos: pos})
		if n.core.Hit(f.AdyenNotifyDuplicateShare, drawSeq(num, pos, 0, 0), sim.KnobAdyenNotifyDuplicate) {
			n.duplicates.Add(1)
			chain = append(chain, &delivery{due: due, item: it, body: body, n: num, pos: pos, copy: 1})
		}
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
	n.queued.Add(int64(len(chain)))
	n.push(chain[0])
}

// push queues d by its due time.
func (n *notifier) push(d *delivery) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	d.order = n.order
	n.order++
	i, _ := slices.BinarySearchFunc(n.queue, d, func(a, b *delivery) int {
		return cmp.Or(a.due.Compare(b.due), cmp.Compare(a.order, b.order))
	})
	n.queue = slices.Insert(n.queue, i, d)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// dispatch hands the deliveries to the workers as they fall due.
func (n *notifier) dispatch() {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		var d *delivery
		wait := time.Duration(-1)
		if len(n.queue) > 0 {
			if w := time.Until(n.queue[0].due); w <= 0 {
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
		var timer *time.Timer
		var fire <-chan time.Time
		if wait >= 0 {
			timer = time.NewTimer(wait)
			fire = timer.C
		}
		select {
		case <-n.wake:
		case <-fire:
		case <-n.stop:
		}
		if timer != nil {
			timer.Stop()
		}
		select {
		case <-n.stop:
			return
		default:
		}
	}
}

func (n *notifier) work() {
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
func (n *notifier) attempt(d *delivery) {
	ok := n.post(d)
	if n.ctx.Err() != nil {
		return // closing: d stays pending
	}
	f := n.core.Faults()
	if ok && n.core.Hit(f.AdyenNotifyFailShare, drawSeq(d.n, d.pos, d.copy, d.attempts), sim.KnobAdyenNotifyFail) {
		n.failedByKnob.Add(1)
		ok = false
	}
	d.attempts++
	if !ok {
		n.retries.Add(1)
		d.due = time.Now().Add(n.backoff << min(d.attempts-1, 6))
		n.push(d)
		return
	}
	n.delivered.Add(1)
	n.told(&d.item)
	if nx := d.next; nx != nil {
		if now := time.Now(); nx.due.Before(now) {
			nx.due = now
		}
		n.push(nx)
	}
	n.pending.Add(-1)
}

// post sends d and reports whether it got a 2xx [accepted].
func (n *notifier) post(d *delivery) bool {
	req, err := http.NewRequestWithContext(n.ctx, http.MethodPost, n.url, bytes.NewReader(d.body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Adyen HttpClient 1.0 (refundkit simulator)")
	res, err := n.client.Do(req)
	if err != nil {
		return false
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1024))
	return err == nil && res.StatusCode >= 200 && res.StatusCode < 300 && strings.TrimSpace(string(b)) == wire.Accepted
}

// flush waits until no notification is pending, or ctx ends.
func (n *notifier) flush(ctx context.Context) error { return n.pending.Wait(ctx) }

// close stops the dispatcher and the workers, cutting posts in flight.
func (n *notifier) close() {
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

func (n *notifier) stats() NotifyStats {
	return NotifyStats{Queued: n.queued.Load(), Delivered: n.delivered.Load(), Retries: n.retries.Load(), Pending: n.pending.N(),
		Duplicates: n.duplicates.Load(), FailedByKnob: n.failedByKnob.Load()}
}
