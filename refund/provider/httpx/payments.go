package httpx

import (
	"sync"

	"github.com/refundkit/refundkit/refund"
)

// Payments keeps what a look-up read of payments whose amount and
// currency cannot change (a captured charge, a capture), for the payment
// check that follows it: the two are then one request.
type Payments struct {
	mu sync.Mutex
	m  map[string]refund.PaymentInfo
}

// Put keeps info for payment id.
func (p *Payments) Put(id string, info refund.PaymentInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil || len(p.m) >= 4096 { // the items in flight, many times over
		p.m = make(map[string]refund.PaymentInfo)
	}
	p.m[id] = info
}

// Get returns what is kept for id, said Kept.
func (p *Payments) Get(id string) (refund.PaymentInfo, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	info, ok := p.m[id]
	info.Kept = ok
	return info, ok
}
