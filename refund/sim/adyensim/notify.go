package adyensim

import (
	"cmp"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

// notifier is Adyen's side of the webhook: signed notifications, each
// posted until accepted, with backoff, by the core's sim.Notifier. A
// refund's go out one after the other, in the order they are due;
// different refunds' side by side.
type notifier struct {
	core *sim.Core
	key  []byte
	told func(*wire.Item) // a receiver accepted the item
	out  *sim.Notifier

	duplicates atomic.Int64
}

// CheckNotifyURL reports an error unless u is an http(s) loopback URL.
func CheckNotifyURL(u string) error { return sim.CheckLoopbackURL("notify url", "notifications", u) }

func newNotifier(core *sim.Core, u string, key []byte, backoff time.Duration, told func(*wire.Item)) (*notifier, error) {
	if err := CheckNotifyURL(u); err != nil {
		return nil, err
	}
	if len(key) == 0 {
		return nil, errors.New("adyen notifications need an HMAC key to sign them")
	}
	n := &notifier{core: core, key: key, told: told}
	n.out = sim.NewNotifier(sim.NotifierConfig{URL: u, Backoff: cmp.Or(backoff, DefaultNotifyBackoff),
		Accepted: func(status int, body []byte) bool {
			return status >= 200 && status < 300 && strings.TrimSpace(string(body)) == wire.Accepted
		}})
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
	var chain []*sim.Delivery
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
		chain = append(chain, n.delivery(due, &it, body, num, pos, 0))
		if n.core.Hit(f.AdyenNotifyDuplicateShare, drawSeq(num, pos, 0, 0), sim.KnobAdyenNotifyDuplicate) {
			n.duplicates.Add(1)
			chain = append(chain, n.delivery(due, &it, body, num, pos, 1))
		}
	}
	n.out.Enqueue(chain...)
}

// delivery is item it of refund num (copy 1: its duplicate), due at due.
func (n *notifier) delivery(due time.Time, it *wire.Item, body []byte, num, pos, copy int) *sim.Delivery {
	return &sim.Delivery{Due: due, Body: body,
		Header: func(h http.Header) { h.Set("User-Agent", "Adyen HttpClient 1.0 (refundkit simulator)") },
		// The knobs in force at the attempt, as before the core's notifier.
		Fail: func(attempt int) bool {
			return n.core.Hit(n.core.Faults().AdyenNotifyFailShare, drawSeq(num, pos, copy, attempt), sim.KnobAdyenNotifyFail)
		},
		Done: func(bool) { n.told(it) }}
}

func (n *notifier) stats() NotifyStats {
	c := n.out.Counts()
	return NotifyStats{Queued: c.Queued, Delivered: c.Delivered, Retries: c.Retries, Pending: c.Pending,
		Duplicates: n.duplicates.Load(), FailedByKnob: c.FailedByKnob}
}
