package refund_test

// Bindings: an item is credited only with a refund that is its own, and a
// refund of the batch for another item holds an item only when the plan
// does not own it.

import (
	"context"
	"io"
	"path/filepath"
	"sync"
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
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
