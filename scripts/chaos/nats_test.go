package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
)

// TestNATSCheckKeptCountsLostRecords: the NATS rows' record check counts a
// record dropped from an item's value and a record rewritten since the
// snapshot as lost, and records added since as nothing, so a clean row
// means something.
func TestNATSCheckKeptCountsLostRecords(t *testing.T) {
	m := &matrix{opts: options{Log: testWriter{t}}, work: t.TempDir()}
	tl := &tally{Name: "test"}
	r, err := m.newRig(tl, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	cp := openNATS(r, "kept").(*natsCheckpoint)
	if tl.ProblemCount > 0 {
		t.Fatalf("setup: %q", tl.Problems)
	}
	ctx := context.Background()
	w, err := natsjs.Open(ctx, cp.url(), natsjs.Options{Lease: time.Minute, Worker: "t"}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var plan []refund.PlanLine
	for i, id := range []string{"a", "b", "c"} {
		plan = append(plan, refund.PlanLine{Line: i + 1, Item: &refund.Item{Batch: "B", Item: id, Charge: "ch_" + id, Amount: 100, Currency: "usd"}})
	}
	if err := w.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	claimed, _, err := w.Claim(ctx, 3, false)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %d items, %v", len(claimed), err)
	}
	intent := func(item string, attempt int) *journal.Record {
		return &journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: time.Now().UTC(), Batch: "B", Item: item,
			Charge: "ch_" + item, Attempt: attempt, Key: fmt.Sprintf("k-%s-%d", item, attempt), Amount: 100, Currency: "usd"}
	}
	for _, cl := range claimed {
		if err := w.Append(intent(cl.Item, 1), intent(cl.Item, 2)); err != nil {
			t.Fatal(err)
		}
	}
	b := &sharedBatch{r: r, cp: cp}
	snap, err := cp.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) != 6 {
		t.Fatalf("the snapshot holds %d records, want 6", len(snap))
	}
	b.checkKept(snap, "untouched")
	if tl.Lost != 0 || tl.ProblemCount != 0 {
		t.Fatalf("nothing changed, yet %d records lost, %d problems: %q", tl.Lost, tl.ProblemCount, tl.Problems)
	}
	if err := w.Append(intent("c", 3)); err != nil { // added: not lost
		t.Fatal(err)
	}
	// By hand, as no refundkit write would: a's first record dropped (its
	// second moves up), b's second rewritten.
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", cp.srv.Port))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, "refundkit_kept")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeysFiltered(ctx, "item.>")
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]json.RawMessage
		var recs []json.RawMessage
		var item string
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			t.Fatal(err)
		}
		json.Unmarshal(v["records"], &recs)
		json.Unmarshal(v["item"], &item)
		switch item {
		case "a":
			recs = recs[1:]
		case "b":
			recs[1] = bytes.Replace(recs[1], []byte(`"amount":100`), []byte(`"amount":99`), 1)
		default:
			continue
		}
		v["records"], _ = json.Marshal(recs)
		body, _ := json.Marshal(v)
		if _, err := kv.Put(ctx, k, body); err != nil {
			t.Fatal(err)
		}
	}
	b.checkKept(snap, "after the edits")
	if tl.Lost != 3 || tl.ProblemCount != 1 || !strings.Contains(strings.Join(tl.Problems, ""), "lost 3 of the 6 records") {
		t.Errorf("a record dropped (and the next moved up) and one rewritten: %d lost, %d problems %q; want 3 lost in 1 problem", tl.Lost, tl.ProblemCount, tl.Problems)
	}
}
