package refund

import (
	"context"
	"testing"
	"time"
)

func TestPacerAdapts(t *testing.T) {
	p := NewPacer(Limits{Global: 80, Create: 20, List: 20})
	t0 := time.Now()
	p.endpoint(EndpointCreate).cut(t0)
	if got := p.Rates(); got.Create != 10 || got.Global != 80 || got.List != 20 {
		t.Fatalf("after an endpoint 429: %+v, want create halved only", got)
	}
	// The 429s of the other requests in flight then do not cut again.
	p.endpoint(EndpointCreate).cut(t0.Add(cutEvery / 2))
	if got := p.Rates().Create; got != 10 {
		t.Fatalf("a second 429 within %v cut again: %v", cutEvery, got)
	}
	for i := 0; i < 5; i++ {
		p.endpoint(EndpointCreate).cut(t0.Add(time.Duration(i+1) * cutEvery))
	}
	if got := p.Rates().Create; got != 1 {
		t.Fatalf("after many 429s: %v, want the floor, a twentieth of 20", got)
	}
	// Answers win the rate back, a hundredth of the target each.
	for range 10 {
		p.Answered(EndpointCreate)
	}
	if got := p.Rates().Create; got < 2.99 || got > 3.01 {
		t.Fatalf("after 10 answers: %v, want 3", got)
	}
	for range 1000 {
		p.Answered(EndpointCreate)
	}
	if got := p.Rates().Create; got != 20 {
		t.Fatalf("after many answers: %v, want back at the target 20 and no more", got)
	}
	// The budget the refusal names is the one cut.
	p.Throttled(EndpointList, true)
	if got := p.Rates(); got.Global != 40 || got.List != 20 {
		t.Fatalf("after a global-rate 429: %+v, want the account's budget halved", got)
	}
	p.Throttled(EndpointList, false)
	if got := p.Rates(); got.List != 10 {
		t.Fatalf("after an endpoint-rate 429 on the look-ups: %+v", got)
	}
}

func TestPacerWithoutLimits(t *testing.T) {
	p := NewPacer(Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	for range 1000 {
		if err := p.Wait(ctx, EndpointCreate); err != nil {
			t.Fatal(err)
		}
	}
	p.Throttled(EndpointCreate, false)
	p.Answered(EndpointList)
	cancel()
	if err := p.Wait(ctx, EndpointList); err == nil {
		t.Fatal("Wait after cancel: want the context's error")
	}
}

// Scale moves every budget's ceiling at once and keeps where each stands
// under it: a budget cut by a 429 stays cut, in proportion, and wins back
// the new ceiling, never the old one.
func TestPacerScale(t *testing.T) {
	p := NewPacer(Limits{Global: 20, Create: 20, List: 20, Get: 10})
	p.Throttled(EndpointCreate, false) // create at 10 of 20
	p.Scale(0.5)
	if got := p.Rates(); got != (Limits{Global: 10, Create: 5, List: 10, Get: 5}) {
		t.Fatalf("scaled by 1/2: %+v, want every ceiling halved, create still at half its own", got)
	}
	if got := p.global().lim.Limit(); got != 10 {
		t.Fatalf("the global limiter paces at %v, want 10", got)
	}
	for range 1000 {
		p.Answered(EndpointCreate)
	}
	if got := p.Rates(); got.Create != 10 || got.Global != 10 {
		t.Fatalf("after many answers at scale 1/2: %+v, want back at the new ceilings and no more", got)
	}
	p.Scale(1)
	if got := p.Rates(); got != (Limits{Global: 20, Create: 20, List: 20, Get: 10}) {
		t.Fatalf("scaled back to 1: %+v, want the limits given", got)
	}
	p.Scale(4) // more than the limits: clamped
	p.Scale(0) // nonsense: ignored
	if got := p.Rates(); got.Global != 20 {
		t.Fatalf("Scale(4), Scale(0): global at %v, want 20", got.Global)
	}
	var nilPacer *Pacer
	nilPacer.Scale(0.5)
}

// Scale is safe beside requests waiting for their turn (run with -race).
func TestPacerScaleConcurrent(t *testing.T) {
	p := NewPacer(Limits{Global: 1000, Create: 1000})
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			if err := p.Wait(ctx, EndpointCreate); err != nil {
				t.Error(err)
				return
			}
			p.Done(EndpointCreate, nil)
		}
	}()
	for i := range 200 {
		p.Scale(1 / float64(1+i%4))
	}
	<-done
}

// TestPacerLookupSpendsItsRequests: a look-up of two requests (PayPal's)
// takes two of the account's budget, so --rate R is R requests, not R calls.
func TestPacerLookupSpendsItsRequests(t *testing.T) {
	p := NewPacer(Limits{Global: 100, List: 50, ListRequests: 2})
	now := time.Now()
	before := p.global().lim.TokensAt(now)
	if err := p.Wait(context.Background(), EndpointList); err != nil {
		t.Fatal(err)
	}
	if spent := before - p.global().lim.TokensAt(now); spent < 1.99 || spent > 2.01 {
		t.Errorf("a look-up spent %.2f of the account's budget, want 2", spent)
	}
	before = p.global().lim.TokensAt(now)
	if err := p.Wait(context.Background(), EndpointCreate); err != nil {
		t.Fatal(err)
	}
	if spent := before - p.global().lim.TokensAt(now); spent < 0.99 || spent > 1.01 {
		t.Errorf("a create spent %.2f, want 1", spent)
	}
}
