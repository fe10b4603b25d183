package refund

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Endpoint names the budget a request spends, besides the account's.
type Endpoint int

const (
	EndpointCreate  Endpoint = iota // Provider.Create (Stripe: POST /v1/refunds)
	EndpointList                    // Provider.Find, the look-up (GET /v1/refunds)
	EndpointCharges                 // Provider.Payment (GET /v1/charges)
	EndpointGet                     // Provider.Get (GET /v1/refunds/{id})
	nEndpoints
)

// Limits are request rates per second; 0 means no limit.
type Limits struct {
	Global, Create, List, Charges, Get float64
	// ListRequests is how many of Global one look-up spends; 0 is one.
	ListRequests int
}

// Slowest is the lowest of the rates l limits (requests/s), 0 when it
// limits none: a command refuses a pace that never sends in time.
func (l Limits) Slowest() float64 {
	slowest := 0.0
	for _, r := range l.rates() {
		if r > 0 && (slowest == 0 || r < slowest) {
			slowest = r
		}
	}
	return slowest
}

// Pacer paces a run's requests within the account's and each endpoint's
// limits, and adapts: a 429 halves the budget it names, each answer wins a
// little back, so a run settles near what it is allowed. Safe for
// concurrent use; a nil *Pacer lets everything through.
type Pacer struct {
	budgets      [1 + nEndpoints]*adaptive // the account's, then by Endpoint
	listRequests int                       // of the account's, a look-up's
}

// rates are l's: the account's, then by Endpoint.
func (l Limits) rates() [1 + nEndpoints]float64 {
	return [...]float64{l.Global, l.Create, l.List, l.Charges, l.Get}
}

// NewPacer returns a pacer for limits.
func NewPacer(l Limits) *Pacer {
	p := &Pacer{listRequests: max(l.ListRequests, 1)}
	for i, r := range l.rates() {
		p.budgets[i] = newAdaptive(r)
	}
	return p
}

func (p *Pacer) global() *adaptive { return p.budgets[0] }

func (p *Pacer) endpoint(e Endpoint) *adaptive { return p.budgets[1+e] }

// Wait blocks until a request to e may go, or ctx ends.
func (p *Pacer) Wait(ctx context.Context, e Endpoint) error {
	if p == nil {
		return ctx.Err()
	}
	if err := p.endpoint(e).waitN(ctx, 1); err != nil {
		return err
	}
	n := 1
	if e == EndpointList {
		n = p.listRequests
	}
	return p.global().waitN(ctx, n)
}

// Throttled slows the budget a refusal for the rate named
// (Failure.AccountLimit): the account's, else the endpoint's.
func (p *Pacer) Throttled(e Endpoint, account bool) {
	if account {
		p.global().cut(time.Now())
		return
	}
	p.endpoint(e).cut(time.Now())
}

// Done tells the pacer how a request to e went (err from a Provider): a
// 429 slows, an answer speeds up, no answer changes nothing.
func (p *Pacer) Done(e Endpoint, err error) {
	if p == nil {
		return
	}
	if err == nil {
		p.Answered(e)
		return
	}
	switch f := Classify(err); {
	case f.RateLimited:
		p.Throttled(e, f.AccountLimit)
	case f.Status != 0:
		p.Answered(e)
	}
}

// Answered wins back some of the rate of the budgets a request spent.
func (p *Pacer) Answered(e Endpoint) {
	p.endpoint(e).grow()
	p.global().grow()
}

// Scale sets every budget's ceiling to f times its limit (f in (0, 1]):
// this run's share when workers split one account. A budget cut to half
// its ceiling stays at half of the new one. A nil *Pacer ignores it.
func (p *Pacer) Scale(f float64) {
	if p == nil || !(f > 0) {
		return
	}
	f = min(f, 1)
	for _, a := range p.budgets {
		a.scale(f)
	}
}

// Rates reports the current rates (requests/s) of the budgets.
func (p *Pacer) Rates() Limits {
	var r [1 + nEndpoints]float64
	for i, a := range p.budgets {
		r[i] = a.rate()
	}
	return Limits{Global: r[0], Create: r[1], List: r[2], Charges: r[3], Get: r[4]}
}

// adaptive is one budget: a token bucket whose rate moves between a floor
// and its target; nil (no limit) lets everything through.
type adaptive struct {
	mu      sync.Mutex
	lim     *rate.Limiter
	limit   float64 // the ceiling NewPacer was given
	target  float64 // the ceiling now: limit times the pacer's scale
	cur     float64
	lastCut time.Time
}

func newAdaptive(target float64) *adaptive {
	if target <= 0 {
		return nil
	}
	return &adaptive{lim: rate.NewLimiter(rate.Limit(target), burstOf(target)), limit: target, target: target, cur: target}
}

// burstOf is a budget's bucket at rate r: a tenth of a second's worth, so
// workers starting together send no burst.
func burstOf(r float64) int { return max(1, int(r/10)) }

// scale sets the ceiling to f times the limit, keeping cur/target.
func (a *adaptive) scale(f float64) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	target := a.limit * f
	if target == a.target {
		return
	}
	a.cur = a.cur / a.target * target
	a.target = target
	a.lim.SetLimit(rate.Limit(a.cur))
	a.lim.SetBurst(burstOf(target))
}

// waitN waits for n requests' worth, at most a bucket at once.
func (a *adaptive) waitN(ctx context.Context, n int) error {
	if a == nil {
		return ctx.Err()
	}
	for n > 0 {
		k := min(n, a.lim.Burst())
		if err := a.lim.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// cutEvery bounds how often 429s cut a budget: one cut answers the 429s
// of all the requests in flight.
const cutEvery = 500 * time.Millisecond

func (a *adaptive) cut(now time.Time) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.lastCut) < cutEvery {
		return
	}
	a.lastCut = now
	a.cur = max(a.target/20, a.cur/2)
	a.lim.SetLimit(rate.Limit(a.cur))
}

// grow adds a hundredth of the target per answered request.
func (a *adaptive) grow() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur >= a.target {
		return
	}
	a.cur = min(a.target, a.cur+a.target/100)
	a.lim.SetLimit(rate.Limit(a.cur))
}

func (a *adaptive) rate() float64 {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur
}
