package refund_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// tellingProvider is a memProvider whose events tell some refunds' ends
// (refund.Teller), counting the Gets that are still asked.
type tellingProvider struct {
	*memProvider
	mu   sync.Mutex
	told map[string]refund.Refund // what the events say, by refund id
	err  error                    // what Told answers for every id, when set
	gets int
}

func (p *tellingProvider) Told(_ context.Context, id string) (refund.Refund, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return refund.Refund{}, false, p.err
	}
	r, ok := p.told[id]
	return r, ok, nil
}

func (p *tellingProvider) Get(ctx context.Context, id string) (refund.Refund, error) {
	p.mu.Lock()
	p.gets++
	p.mu.Unlock()
	return p.memProvider.Get(ctx, id)
}

// tell makes the events say of refund id what the provider holds, changed by edit.
func (p *tellingProvider) tell(t *testing.T, id string, edit func(*refund.Refund)) {
	t.Helper()
	r, err := p.memProvider.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	edit(&r)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.told == nil {
		p.told = map[string]refund.Refund{}
	}
	p.told[id] = r
}

func tellingRun(t *testing.T, p *tellingProvider, path, plan string) (map[string]refund.Result, refund.Summary) {
	t.Helper()
	w, state, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	res := map[string]refund.Result{}
	var mu sync.Mutex
	sum, err := refund.Run(context.Background(), refund.Config{Provider: p, Checkpoint: refund.Journal(w, state), Workers: 2,
		OnResult: func(r refund.Result) { mu.Lock(); res[r.Item] = r; mu.Unlock() }}, strings.NewReader(plan), "plan.jsonl")
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return res, sum
}

// Pending refunds whose events tell their end settle from the events with
// no Get; those the events tell nothing of, or only pending, are asked.
// An event that contradicts the journal's binding settles nothing.
func TestTellerSettlesPendingRefundsWithNoRequest(t *testing.T) {
	plan := `{"batch":"b","item":"told","charge":"ch_1","amount":500}
{"batch":"b","item":"failed","charge":"ch_2","amount":300}
{"batch":"b","item":"silent","charge":"ch_3","amount":200}
{"batch":"b","item":"still","charge":"ch_4","amount":100}
{"batch":"b","item":"lying","charge":"ch_5","amount":400}
{"batch":"b","item":"other","charge":"ch_6","amount":600}
{"batch":"b","item":"bare","charge":"ch_7","amount":700}
{"batch":"b","item":"zero","charge":"ch_8","amount":800}
`
	p := &tellingProvider{memProvider: &memProvider{pending: true}}
	path := filepath.Join(t.TempDir(), "j.jsonl")
	res, _ := tellingRun(t, p, path, plan)
	ids := map[string]string{}
	for item, r := range res {
		if r.Status != refund.StatusPending {
			t.Fatalf("first run: %s %+v, want pending", item, r)
		}
		ids[item] = r.Refund
	}
	succeeded := func(r *refund.Refund) { r.Status = refund.RefundSucceeded }
	p.tell(t, ids["told"], succeeded)
	p.tell(t, ids["failed"], func(r *refund.Refund) { r.Status = refund.RefundFailed })
	p.tell(t, ids["still"], func(*refund.Refund) {}) // pending yet
	p.tell(t, ids["lying"], func(r *refund.Refund) { succeeded(r); r.Amount = 4000 })
	p.tell(t, ids["other"], func(r *refund.Refund) {
		succeeded(r)
		r.Metadata = map[string]string{refund.MetaBatch: "b", refund.MetaItem: "told", refund.MetaAttempt: "0"}
	})
	// An event that says only its status, or an amount of 0, binds nothing.
	p.tell(t, ids["bare"], func(r *refund.Refund) { *r = refund.Refund{ID: r.ID, Status: refund.RefundSucceeded} })
	p.tell(t, ids["zero"], func(r *refund.Refund) { succeeded(r); r.Amount = 0 })
	p.settle(ids["silent"], refund.RefundSucceeded) // only a Get learns it

	gets := p.gets
	res, sum := tellingRun(t, p, path, plan)
	want := map[string]string{"told": refund.StatusRefunded, "failed": refund.StatusFailed, "silent": refund.StatusRefunded,
		"still": refund.StatusPending, "lying": refund.StatusPending, "other": refund.StatusPending,
		"bare": refund.StatusPending, "zero": refund.StatusPending}
	for item, status := range want {
		if r := res[item]; r.Status != status || r.Refund != ids[item] {
			t.Errorf("%s: %+v, want %s with %s", item, r, status, ids[item])
		}
	}
	if sum.RefundsTold != 2 || sum.EventsContradicting != 4 {
		t.Errorf("RefundsTold %d, EventsContradicting %d; want 2 (told, failed) and 4 (lying, other, bare, zero)", sum.RefundsTold, sum.EventsContradicting)
	}
	// Only told and failed cost no request: the events of lying, other,
	// bare and zero do not bind and settle nothing, so the provider is
	// asked (and says pending still); no run is halted by them.
	if got := p.gets - gets; got != 6 {
		t.Errorf("%d Gets on the rerun, want 6 (silent, still, lying, other, bare, zero)", got)
	}
	if p.creates != 8 {
		t.Errorf("%d creates, want 8: nothing sent again", p.creates)
	}
}

// Events that cannot be read leave the item as it was journaled, said
// as a failed look-up: nothing taken from them, nothing asked past them,
// nothing sent.
func TestTellerErrorLeavesTheItemAsJournaled(t *testing.T) {
	plan := `{"batch":"b","item":"i","charge":"ch_1","amount":500}` + "\n"
	p := &tellingProvider{memProvider: &memProvider{pending: true}}
	path := filepath.Join(t.TempDir(), "j.jsonl")
	tellingRun(t, p, path, plan)
	p.err = errors.New("events.jsonl:3: signature does not verify")
	gets := p.gets
	res, _ := tellingRun(t, p, path, plan)
	r := res["i"]
	if r.Status != refund.StatusPending || r.Code != refund.CodeLookupFailed || !strings.Contains(r.Message, "events.jsonl:3") {
		t.Errorf("%+v, want pending, %s naming the line", r, refund.CodeLookupFailed)
	}
	if p.gets != gets || p.creates != 1 {
		t.Errorf("%d Gets, %d creates: want none past the events, one create", p.gets-gets, p.creates)
	}
}
