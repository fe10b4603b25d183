package refund_test

// The engine's safety with providers and checkpoints other than Stripe and
// the JSONL journal: what a provider cannot do, or a checkpoint that fails,
// must never cost a second refund or leave a hold that is not true.

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

// piBlind looks refunds up by charge but cannot by payment intent: Find
// says ErrNoLookup for a payment named by its intent only.
type piBlind struct{ *memProvider }

func (p piBlind) Find(ctx context.Context, pay refund.Payment) ([]refund.Refund, error) {
	if pay.Charge == "" {
		return nil, refund.ErrNoLookup
	}
	return p.memProvider.Find(ctx, pay)
}

// TestNoLookupIsPerPayment: one ErrNoLookup, for one payment, turns the
// look-up off for every later item of the run (engine.noLookup), so an
// item on a charge that another batch already refunded, which the
// provider could have looked up, is refunded a second time instead of
// held (refunded_by_other_batch).
func TestNoLookupIsPerPayment(t *testing.T) {
	mem := &memProvider{}
	mem.add("ch_2", 1000, map[string]string{refund.MetaBatch: "OTHER", refund.MetaItem: "x", refund.MetaAttempt: "1"})
	p := piBlind{mem}
	path := filepath.Join(t.TempDir(), "j.jsonl")
	plan := `{"batch":"B","item":"i1","payment_intent":"pi_1"}` + "\n" + `{"batch":"B","item":"i2","charge":"ch_2"}` + "\n"
	res := providerRun(t, p, path, plan)
	if got := res["i2"]; got.Status != refund.StatusFailed || got.Code != refund.CodeRefundedByOtherBatch {
		t.Errorf("i2 on ch_2, refunded by batch OTHER: %s %s, want failed %s", got.Status, got.Code, refund.CodeRefundedByOtherBatch)
	}
	mem.mu.Lock()
	defer mem.mu.Unlock()
	n := 0
	for _, r := range mem.refunds {
		if r.Charge == "ch_2" && refund.Live(&r) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("ch_2 holds %d live refunds, want 1", n)
	}
}

// providerRun runs plan against any provider, one worker (in plan order).
func providerRun(t *testing.T, p refund.Provider, path, plan string) map[string]refund.Result {
	t.Helper()
	return providerRunWith(t, p, path, plan, refund.Config{})
}

func providerRunWith(t *testing.T, p refund.Provider, path, plan string, cfg refund.Config) map[string]refund.Result {
	t.Helper()
	w, state, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	res := map[string]refund.Result{}
	cfg.Provider, cfg.Checkpoint, cfg.Workers = p, refund.Journal(w, state), 1
	cfg.OnResult = func(r refund.Result) { res[r.Item] = r }
	if _, err := refund.Run(context.Background(), cfg, strings.NewReader(plan), "plan.jsonl"); err != nil {
		t.Fatalf("run: %v", err)
	}
	return res
}

func (p piBlind) Create(ctx context.Context, it *refund.Item, attempt int) (refund.Answer, error) {
	a, err := p.memProvider.Create(ctx, it, attempt)
	if it.PaymentIntent != "" {
		a.PaymentIntent = it.PaymentIntent
	}
	return a, err
}

// TestJournalIsNoLicenceForARefundThePlanDoesNotOwn: a refund of the
// batch for an item the journal puts on the charge but the plan no longer
// lists (renamed, dropped) holds the item, as it does with the journal
// lost; the plan listing that item on the charge lets it through.
func TestJournalIsNoLicenceForARefundThePlanDoesNotOwn(t *testing.T) {
	p := &memProvider{}
	path := filepath.Join(t.TempDir(), "j.jsonl")
	if r := memRun(t, p, path, `{"batch":"B","item":"i1","charge":"ch_1","amount":100}`+"\n", false); r["i1"].Status != refund.StatusRefunded {
		t.Fatalf("run 1: %+v", r["i1"])
	}
	r := memRun(t, p, path, `{"batch":"B","item":"i2","charge":"ch_1","amount":200}`+"\n", false)
	if r["i2"].Status != refund.StatusFailed || r["i2"].Code != refund.CodeRefundedByOtherItem {
		t.Errorf("i2 beside a refund of i1, which its plan does not list: %s (%s), want held as %s", r["i2"].Status, r["i2"].Code, refund.CodeRefundedByOtherItem)
	}
	both := `{"batch":"B","item":"i1","charge":"ch_1","amount":100}` + "\n" + `{"batch":"B","item":"i3","charge":"ch_1","amount":200}` + "\n"
	if r := memRun(t, p, path, both, false); r["i3"].Status != refund.StatusRefunded || r["i1"].Status != refund.StatusSkipped {
		t.Errorf("i3 with i1 planned beside it: i3 %s (%s), i1 %s; want refunded and skipped", r["i3"].Status, r["i3"].Code, r["i1"].Status)
	}
	if p.creates != 2 {
		t.Errorf("%d creates, want 2 (i1, i3)", p.creates)
	}
}

// savedFailure answers the first create of every key with an
// indeterminate failure that it saves under the key and replays for ever,
// as Provider's ClassIndeterminate says ("the provider saved an error
// answer under the key"), with an HTTP status other than 500.
type savedFailure struct {
	*memProvider
	status int
	mu     sync.Mutex
	burned map[string]bool
	keys   []string
}

func (p *savedFailure) Create(ctx context.Context, it *refund.Item, attempt int) (refund.Answer, error) {
	key := refund.IdempotencyKey(it.Batch, it.Item, attempt)
	p.mu.Lock()
	p.keys = append(p.keys, key)
	if p.burned == nil {
		p.burned = map[string]bool{}
	}
	first := len(p.burned) == 0
	if first {
		p.burned[key] = true
	}
	replay := p.burned[key]
	p.mu.Unlock()
	if replay {
		return refund.Answer{}, &refund.Failure{Class: refund.ClassIndeterminate, Status: p.status, Code: "internal", Message: "saved", Err: errors.New("saved indeterminate answer")}
	}
	return p.memProvider.Create(ctx, it, attempt)
}

// TestIndeterminateBurnsTheKeyWhateverItsStatus: the engine journals an
// indeterminate failure with the provider's status, and the journal burns
// the key only for http_status 500 (journal.Next): a provider whose saved
// indeterminate answer is a 503 (or none, 0) never gets a new key, so the
// item stays in doubt for ever, even with ResendAfter500.
func TestIndeterminateBurnsTheKeyWhateverItsStatus(t *testing.T) {
	for _, status := range []int{500, 503} {
		p := &savedFailure{memProvider: &memProvider{}, status: status}
		path := filepath.Join(t.TempDir(), "j.jsonl")
		plan := `{"batch":"B","item":"i1","charge":"ch_1","amount":100}` + "\n"
		if r := providerRun(t, p, path, plan); r["i1"].Status != refund.StatusInDoubt {
			t.Fatalf("status %d, run 1: %+v", status, r["i1"])
		}
		r := providerRunCfg(t, p, path, plan, refund.Config{ResendAfter500: true})
		if r["i1"].Status != refund.StatusRefunded || r["i1"].Attempt != 2 {
			t.Errorf("provider status %d, run 2 with ResendAfter500: %s attempt %d (%s), want refunded under attempt 2; keys sent %v",
				status, r["i1"].Status, r["i1"].Attempt, r["i1"].Code, p.keys)
		}
	}
}

// providerRunCfg is providerRun with cfg's flags.
func providerRunCfg(t *testing.T, p refund.Provider, path, plan string, cfg refund.Config) map[string]refund.Result {
	t.Helper()
	return providerRunWith(t, p, path, plan, cfg)
}
