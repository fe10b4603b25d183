package refund_test

// Bindings: an item is credited only with a refund that is its own, and a
// refund of the batch for another item holds an item only when the plan
// does not own it.

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// findHook tells of every look-up before answering it.
type findHook struct {
	*memProvider
	onFind func(refund.Payment)
}

func (p findHook) Find(ctx context.Context, pay refund.Payment) ([]refund.Refund, error) {
	p.onFind(pay)
	return p.memProvider.Find(ctx, pay)
}

// A streamed plan: the item whose refund stands on the charge comes on a
// later line than its sibling, which is looked up before that line is read.
// The sibling waits for the plan's end instead of being held for a refund
// its plan owns.
func TestASiblingOnALaterLineIsNoHold(t *testing.T) {
	mem := &memProvider{}
	// i1's refund, made by a run whose journal was lost.
	mem.add("ch_1", 100, map[string]string{refund.MetaBatch: "B", refund.MetaItem: "i1", refund.MetaAttempt: "1"})
	pr, pw := io.Pipe()
	looked := make(chan struct{})
	var once sync.Once
	p := findHook{memProvider: mem, onFind: func(pay refund.Payment) {
		once.Do(func() { close(looked) })
	}}
	go func() {
		io.WriteString(pw, `{"batch":"B","item":"i2","charge":"ch_1","amount":200}`+"\n")
		<-looked // i2 is being looked up: only now does i1's line come
		io.WriteString(pw, `{"batch":"B","item":"i1","charge":"ch_1","amount":100}`+"\n")
		pw.Close()
	}()
	w, state, _, err := journal.Open(filepath.Join(t.TempDir(), "j.jsonl"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	res := map[string]refund.Result{}
	if _, err := refund.Run(context.Background(), refund.Config{Provider: p, Checkpoint: refund.Journal(w, state), Workers: 2,
		OnResult: func(r refund.Result) { res[r.Item] = r }}, pr, "<stdin>"); err != nil {
		t.Fatal(err)
	}
	if r := res["i2"]; r.Status != refund.StatusRefunded || r.Found {
		t.Errorf("i2: %s (%s %s), want refunded now: i1's refund is its planned sibling's", r.Status, r.Code, r.Message)
	}
	if r := res["i1"]; r.Status != refund.StatusRefunded || !r.Found || r.Refund != "mre_1" {
		t.Errorf("i1: %+v, want mre_1 found and adopted", r)
	}
	if mem.creates != 1 {
		t.Errorf("%d creates, want 1 (i2)", mem.creates)
	}
}

// A pending refund the provider answers it does not have (404: a key of
// another account or mode, a refund that never was) is no pending refund:
// the item is in doubt, said on every run, and nothing is sent.
func TestAPendingRefundTheProviderDoesNotHaveIsNotDone(t *testing.T) {
	first := newSim(t, 3, stripesim.Faults{RequiresActionShare: 1})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	plan := planLines("b1", 1, 100)
	if o := run(t, first, path, plan, runOpts{}); o.err != nil || o.results["i1"].Status != refund.StatusPending {
		t.Fatalf("first run: %+v %v, want pending", o.results["i1"], o.err)
	}
	other := newSim(t, 3, stripesim.Faults{}) // the same charges, another account
	for n := 1; n <= 2; n++ {
		o := run(t, other, path, plan, runOpts{})
		if r := o.results["i1"]; o.err != nil || r.Status != refund.StatusInDoubt || r.Code != "resource_missing" {
			t.Errorf("rerun %d: %+v %v, want in doubt (resource_missing)", n, r, o.err)
		}
	}
	if n := other.Creates(); n != 0 {
		t.Errorf("%d creates at the other account, want none", n)
	}
}

// The one check of a plan item against its records, whichever way they
// arrived: each binding a row.
func TestCheckBinding(t *testing.T) {
	it := refund.Item{Batch: "B", Item: "i1", Charge: "ch_1", Amount: 100, Currency: "usd"}
	refunded := journal.ItemState{Status: journal.StatusRefunded, Charge: "ch_1", Refund: "re_1", Amount: 100, Currency: "usd"}
	sent := journal.ItemState{Status: journal.StatusInDoubt, Charge: "ch_1", Sent: true, SentAmount: 100, SentCurrency: "usd"}
	pspSent := journal.ItemState{Status: journal.StatusInDoubt, PSPReference: "8815658961765250", Sent: true, SentAmount: 100, SentCurrency: "usd"}
	captureSent := journal.ItemState{Status: journal.StatusInDoubt, Capture: "2GG279541U471931P", Sent: true, SentAmount: 100, SentCurrency: "usd"}
	toPSP := func(psp string) func(*refund.Item) {
		return func(it *refund.Item) { it.Charge, it.PSPReference = "", psp }
	}
	for _, tc := range []struct {
		name string
		st   journal.ItemState
		edit func(*refund.Item)
		want string // "" when the item agrees
	}{
		{"agrees: refunded", refunded, func(*refund.Item) {}, ""},
		{"agrees: sent", sent, func(*refund.Item) {}, ""},
		{"another charge", refunded, func(it *refund.Item) { it.Charge = "ch_2" }, `the plan names charge "ch_2", but the journal records charge "ch_1"`},
		{"a payment intent for a charge", refunded, func(it *refund.Item) { it.Charge, it.PaymentIntent = "", "pi_1" }, `the plan names payment_intent "pi_1", but the journal records charge "ch_1"`},
		{"another amount sent", sent, func(it *refund.Item) { it.Amount = 150 }, "amount 150, but the journal records 100 as sent"},
		{"another currency sent", sent, func(it *refund.Item) { it.Currency = "jpy" }, `currency "jpy", but the journal records "usd" as sent`},
		{"another amount refunded, no intent", refunded, func(it *refund.Item) { it.Amount = 150 }, "amount 150, but the journal records refund re_1 of 100"},
		{"another currency refunded, no intent", refunded, func(it *refund.Item) { it.Currency = "jpy" }, `currency "jpy", but the journal records refund re_1 in "usd"`},
		{"agrees: psp_reference", pspSent, toPSP("8815658961765250"), ""},
		{"another psp_reference", pspSent, toPSP("QFQTPCQ8HXSKGK82"), `item "i1" of batch "B": the plan names psp_reference "QFQTPCQ8HXSKGK82", but the journal records psp_reference "8815658961765250" for it`},
		{"a charge for a psp_reference", pspSent, func(*refund.Item) {}, `the plan names charge "ch_1", but the journal records psp_reference "8815658961765250"`},
		{"a psp_reference for a charge", refunded, toPSP("8815658961765250"), `the plan names psp_reference "8815658961765250", but the journal records charge "ch_1"`},
		{"a psp_reference for a capture", captureSent, toPSP("8815658961765250"), `the plan names psp_reference "8815658961765250", but the journal records capture "2GG279541U471931P"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := it
			tc.edit(&it)
			err := refund.CheckBinding(&it, tc.st)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// The look-up finds the item's own refund in another currency than the
// plan says (an earlier plan made it): not what the plan asks, so nothing
// is sent, and a person decides.
func TestAnOwnRefundInAnotherCurrencyIsNotAdopted(t *testing.T) {
	mem := &memProvider{}
	mem.add("ch_1", 100, map[string]string{refund.MetaBatch: "B", refund.MetaItem: "i1", refund.MetaAttempt: "1"}) // eur
	r := memRun(t, mem, filepath.Join(t.TempDir(), "j.jsonl"), `{"batch":"B","item":"i1","charge":"ch_1","amount":100,"currency":"usd"}`+"\n", false)["i1"]
	if r.Status != refund.StatusFailed || r.Code != refund.CodeCurrencyDiffers || mem.creates != 0 {
		t.Errorf("%+v after %d creates, want failed (%s), nothing sent", r, mem.creates, refund.CodeCurrencyDiffers)
	}
}

// Journals of two plans merged: the item's records name two charges. The
// item is refused (exit 2), not skipped as refunded on the other charge.
func TestAnItemBoundToTwoPaymentsIsRefused(t *testing.T) {
	st := journal.NewState()
	st.Apply(&journal.Record{V: journal.Version, Type: journal.TypeIntent, Batch: "B", Item: "i1", Charge: "ch_1", Attempt: 1, Amount: 100})
	st.Apply(&journal.Record{V: journal.Version, Type: journal.TypeRefunded, Batch: "B", Item: "i1", Charge: "ch_2", Attempt: 1, Amount: 100, Refund: "re_2", Currency: "usd", Status: "succeeded"})
	got, _ := st.Lookup("B", "i1")
	it := refund.Item{Batch: "B", Item: "i1", Charge: "ch_1", Amount: 100}
	if err := refund.CheckBinding(&it, got); err == nil || !strings.Contains(err.Error(), "name two different payments") {
		t.Errorf("CheckBinding = %v, want the item refused", err)
	}
}

// As two charges: an item whose records name two psp_references is
// refused, the first named.
func TestAnItemBoundToTwoPSPReferencesIsRefused(t *testing.T) {
	st := journal.NewState()
	st.Apply(&journal.Record{V: journal.Version, Type: journal.TypeIntent, Batch: "B", Item: "i1", PSPReference: "8815658961765250", Attempt: 1, Amount: 100})
	st.Apply(&journal.Record{V: journal.Version, Type: journal.TypeRefunded, Batch: "B", Item: "i1", PSPReference: "QFQTPCQ8HXSKGK82", Attempt: 1, Amount: 100, Refund: "re_2", Currency: "usd", Status: "succeeded"})
	got, _ := st.Lookup("B", "i1")
	for _, psp := range []string{"8815658961765250", "QFQTPCQ8HXSKGK82"} {
		it := refund.Item{Batch: "B", Item: "i1", PSPReference: psp, Amount: 100}
		if err := refund.CheckBinding(&it, got); err == nil || !strings.Contains(err.Error(), "name two different payments for it (psp_reference 8815658961765250 first)") {
			t.Errorf("plan names %s: CheckBinding = %v, want the item refused", psp, err)
		}
	}
}

// A refund the look-up finds for an item (its metadata names it) that the
// journal credits to another item is not this item's: a second claim on a
// refund id is a conflict, never a success.
func TestAdoptingARefundAnotherItemHoldsIsAMismatch(t *testing.T) {
	mem := &memProvider{}
	path := filepath.Join(t.TempDir(), "j.jsonl")
	if r := memRun(t, mem, path, `{"batch":"B","item":"i1","charge":"ch_1","amount":100}`+"\n", false)["i1"]; r.Refund != "mre_1" {
		t.Fatalf("run 1: %+v", r)
	}
	mem.refunds[0].Metadata = map[string]string{refund.MetaBatch: "B", refund.MetaItem: "i2", refund.MetaAttempt: "1"}
	w, state, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	res := map[string]refund.Result{}
	_, err = refund.Run(context.Background(), refund.Config{Provider: mem, Checkpoint: refund.Journal(w, state), Workers: 1,
		OnResult: func(r refund.Result) { res[r.Item] = r }},
		strings.NewReader(`{"batch":"B","item":"i1","charge":"ch_1","amount":100}`+"\n"+`{"batch":"B","item":"i2","charge":"ch_1","amount":100}`+"\n"), "plan.jsonl")
	var h *refund.HaltError
	if r := res["i2"]; !errors.As(err, &h) || r.Status != refund.StatusInDoubt || r.Code != refund.CodeAnswerMismatch || !strings.Contains(r.Message, `credited to item "i1"`) {
		t.Errorf("i2: %+v (run: %v), want in doubt (%s: credited to i1), the run halted", r, err, refund.CodeAnswerMismatch)
	}
	if mem.creates != 1 {
		t.Errorf("%d creates, want 1", mem.creates)
	}
}
