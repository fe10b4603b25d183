package adyen_test

// refund.Run with the Adyen client against the simulator's Adyen routes,
// over the real journal, with the real receiver (webhook.Handler) keeping
// the simulator's signed notifications in a notes file that the runs read:
// the whole loop in one process. Adyen answers only "received"; a later
// run settles each refund from its notification, and an item in doubt is
// sent again only under its own key, and only while Adyen surely keeps it.

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/adyen"
	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
	"github.com/refundkit/refundkit/refund/provider/adyen/webhook"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

const hmacHex = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"

type loop struct {
	t        *testing.T
	sim      *simtest.Sim
	notes    string // the receiver's file
	journal  string
	payments []adyensim.Payment
}

// newLoop starts the simulator, and, with notify, the receiver it posts
// its notifications to.
func newLoop(t *testing.T, n int, notify bool) *loop {
	t.Helper()
	key, err := wire.ParseHMACKey(hmacHex)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l := &loop{t: t, notes: filepath.Join(dir, "notes.jsonl"), journal: filepath.Join(dir, "j.jsonl"),
		payments: adyensim.GeneratePayments(n, 3)}
	cfg := stripesim.Config{Seed: 5, Adyen: adyensim.Config{Payments: l.payments, APIKey: "test-key", MerchantAccount: "Shop"}}
	if notify {
		store, err := notes.OpenFile(l.notes, [][]byte{key}, true)
		if err != nil {
			t.Fatal(err)
		}
		h, err := webhook.New(webhook.Config{Keys: [][]byte{key}, Refunds: store, Others: store, MerchantAccount: "Shop"})
		if err != nil {
			t.Fatal(err)
		}
		recv := httptest.NewServer(h)
		t.Cleanup(func() { recv.Close(); store.Close() })
		cfg.Adyen.NotifyURL, cfg.Adyen.HMACKey = recv.URL+webhook.DefaultPath, key
	}
	l.sim = simtest.Start(t, cfg)
	return l
}

func (l *loop) plan(batch string) string {
	var b strings.Builder
	for _, p := range l.payments {
		fmt.Fprintf(&b, `{"batch":%q,"item":%q,"psp_reference":%q,"amount":%d,"currency":%q}`+"\n", batch, "it-"+p.PSPReference, p.PSPReference, p.Amount/2, "eur")
	}
	return b.String()
}

// flush waits until the simulator delivered every notification.
func (l *loop) flush() {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := l.sim.Adyen().Flush(ctx); err != nil {
		l.t.Fatalf("flush: %v", err)
	}
}

type loseOutcomes struct{ refund.Checkpoint }

func (c loseOutcomes) Append(recs ...*journal.Record) error {
	if recs[0].Type != journal.TypeIntent {
		return errors.New("crashed")
	}
	return c.Checkpoint.Append(recs...)
}

type runOpts struct {
	lose bool
	now  func() time.Time
}

func (l *loop) run(plan string, o runOpts) (map[string]refund.Result, error) {
	l.t.Helper()
	key, _ := wire.ParseHMACKey(hmacHex)
	cfg := adyen.Config{Base: l.sim.URL, APIKey: "test-key", Merchant: "Shop", Conns: 4}
	if store, err := notes.OpenFile(l.notes, [][]byte{key}, false); err == nil {
		defer store.Close()
		cfg.Notes = store
	}
	w, state, _, err := journal.Open(l.journal, journal.Options{})
	if err != nil {
		l.t.Fatal(err)
	}
	defer w.Close()
	var cp refund.Checkpoint = refund.Journal(w, state)
	if o.lose {
		cp = loseOutcomes{cp}
	}
	var mu sync.Mutex
	res := map[string]refund.Result{}
	_, err = refund.Run(context.Background(), refund.Config{Provider: adyen.New(cfg), Checkpoint: cp, Workers: 4, Now: o.now,
		Backoff: refund.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond}, MaxUnanswered: 1000,
		OnResult: func(r refund.Result) { mu.Lock(); res[r.Item] = r; mu.Unlock() }}, strings.NewReader(plan), "plan.jsonl")
	return res, err
}

func count(res map[string]refund.Result, status string) int {
	n := 0
	for _, r := range res {
		if r.Status == status {
			n++
		}
	}
	return n
}

func (l *loop) creates() int64 {
	return l.sim.Calls("POST /v71/payments/{paymentPspReference}/refunds")
}

// TestReceivedThenSettled: a first run leaves every refund pending
// (Adyen said "received"); once the notifications are in, a second run
// settles each as refunded with no call to Adyen.
func TestReceivedThenSettled(t *testing.T) {
	l := newLoop(t, 12, true)
	plan := l.plan("ady1")
	res, err := l.run(plan, runOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(res, refund.StatusPending); n != 12 {
		t.Fatalf("first run: %d pending, want 12: %v", n, res)
	}
	l.flush()
	before := l.creates()
	res, err = l.run(plan, runOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(res, refund.StatusRefunded); n != 12 {
		t.Fatalf("second run: %d refunded, want 12: %v", n, res)
	}
	if d := l.creates() - before; d != 0 {
		t.Fatalf("settling sent %d refund calls", d)
	}
	if got := len(l.sim.Adyen().Refunds()); got != 12 {
		t.Fatalf("%d refunds at Adyen, want 12", got)
	}
}

// inDoubt are the items the journal holds in doubt.
func (l *loop) inDoubt(batch string) map[string]bool {
	l.t.Helper()
	st, _, err := journal.Load(l.journal)
	if err != nil {
		l.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range l.payments {
		if s, ok := st.Lookup(batch, "it-"+p.PSPReference); ok && s.Status == journal.StatusInDoubt {
			out["it-"+p.PSPReference] = true
		}
	}
	if len(out) == 0 {
		l.t.Fatal("no item was left in doubt")
	}
	return out
}

// itemOfKey names the item whose first attempt's key k is.
func (l *loop) itemOfKey(batch, k string) string {
	for _, p := range l.payments {
		if k == wire.Key(batch, "it-"+p.PSPReference, 1) {
			return "it-" + p.PSPReference
		}
	}
	l.t.Fatalf("key %s is no item's first key", k)
	return ""
}

// oneRefundEach checks that every payment holds exactly one refund.
func (l *loop) oneRefundEach() {
	l.t.Helper()
	per := map[string]int{}
	for _, r := range l.sim.Adyen().Refunds() {
		per[r.Payment]++
	}
	for _, p := range l.payments {
		if per[p.PSPReference] != 1 {
			l.t.Errorf("payment %s holds %d refunds, want 1", p.PSPReference, per[p.PSPReference])
		}
	}
}

// TestLostAnswersAdoptedFromNotifications: answers lost after the call (a
// crash before its fsync: the run halts, items in doubt); the
// notifications name each refund by its reference, so the rerun adopts
// those without sending anything for them.
func TestLostAnswersAdoptedFromNotifications(t *testing.T) {
	l := newLoop(t, 10, true)
	plan := l.plan("ady2")
	if _, err := l.run(plan, runOpts{lose: true}); err == nil {
		t.Fatal("a run whose outcomes were lost reported no error")
	}
	doubt := l.inDoubt("ady2")
	l.flush()
	var mu sync.Mutex
	var keys []string
	l.sim.Adyen().SetCreateHook(func(k string) { mu.Lock(); keys = append(keys, k); mu.Unlock() })
	res, err := l.run(plan, runOpts{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if item := l.itemOfKey("ady2", k); doubt[item] {
			t.Errorf("item %s, whose refund a notification told of, was sent again", item)
		}
	}
	for item := range doubt {
		if r := res[item]; r.Status != refund.StatusRefunded || !r.Found {
			t.Errorf("item %s: %s (found %v), want refunded from its notification", item, r.Status, r.Found)
		}
	}
	l.oneRefundEach()
}

// TestInDoubtKeyWindow moves the clock: items whose answers were lost and
// of which no notification tells are sent again under their own key while
// Adyen surely keeps it (half of KeyTTL), which Adyen answers for the
// first call; past that they are never sent again, under any key, and
// stay in doubt for a person; a clock that went back is no licence either.
func TestInDoubtKeyWindow(t *testing.T) {
	l := newLoop(t, 6, false) // no notifications at all
	plan := l.plan("ady3")
	t0 := time.Now()
	if _, err := l.run(plan, runOpts{lose: true, now: func() time.Time { return t0 }}); err == nil {
		t.Fatal("a run whose outcomes were lost reported no error")
	}
	doubt := l.inDoubt("ady3")
	unsent := len(l.payments) - len(doubt) // the run halted before their calls
	for k, c := range []struct {
		name string
		at   time.Time
	}{
		{"past half the key window", t0.Add(wire.KeyTTL/2 + time.Hour)},
		{"past the whole key window", t0.Add(wire.KeyTTL + 24*time.Hour)},
		{"clock gone back a day", t0.Add(-24 * time.Hour)},
	} {
		before := l.creates()
		res, err := l.run(plan, runOpts{now: func() time.Time { return c.at }})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := int64(0)
		if k == 0 {
			want = int64(unsent) // sent once, for the first time
		}
		if d := l.creates() - before; d != want {
			t.Fatalf("%s: %d refund requests, want %d: an item in doubt was sent again", c.name, d, want)
		}
		for item := range doubt {
			if r := res[item]; r.Status != refund.StatusInDoubt || r.Code != refund.CodeNoLookup {
				t.Fatalf("%s: item %s %s %s, want in doubt (%s)", c.name, item, r.Status, r.Code, refund.CodeNoLookup)
			}
		}
	}
	if got := len(l.sim.Adyen().Refunds()); got != len(l.payments) {
		t.Fatalf("%d refunds at Adyen, want %d (one per item)", got, len(l.payments))
	}

	// Within the window: the same key again, answered for the first call.
	before := l.creates()
	res, err := l.run(plan, runOpts{now: func() time.Time { return t0.Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if d := l.creates() - before; d != int64(len(doubt)) {
		t.Fatalf("within the window %d refund requests, want one for each of the %d items in doubt", d, len(doubt))
	}
	for item := range doubt {
		if r := res[item]; r.Status != refund.StatusPending {
			t.Fatalf("within the window: item %s %s, want pending (Adyen's replay of the first answer)", item, r.Status)
		}
	}
	l.oneRefundEach()
}
