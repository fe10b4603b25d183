package audit_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

// line is a plan line of batch b1 for 3.00 on a charge (ch_) or a payment
// intent (pi_).
func line(item, payment string) string {
	field := "charge"
	if strings.HasPrefix(payment, "pi_") {
		field = "payment_intent"
	}
	return fmt.Sprintf(`{"batch":"b1","item":%q,%q:%q,"amount":300,"currency":"usd"}`+"\n", item, field, payment)
}

// bothWaysPlan names payment 1 by its charge (item a) and, 30 lines on,
// by its payment intent (item b); payment 31 by its intent (item c) and,
// 20 lines on, by its charge (item d); every other payment once, by its
// charge. With one list worker (16 lists ahead), the other name of each
// is not yet listed when its first name is checked.
func bothWaysPlan() string {
	var b strings.Builder
	b.WriteString(line("a", "ch_a1"))
	for i := 2; i <= 30; i++ {
		b.WriteString(line(fmt.Sprintf("f%d", i), fmt.Sprintf("ch_a%d", i)))
	}
	b.WriteString(line("b", "pi_a1"))
	b.WriteString(line("c", "pi_a31"))
	for i := 32; i <= 50; i++ {
		b.WriteString(line(fmt.Sprintf("f%d", i), fmt.Sprintf("ch_a%d", i)))
	}
	b.WriteString(line("d", "ch_a31"))
	return b.String()
}

// A payment named by its charge and by its payment intent is one payment
// with two partial refunds: each item has its own, and audit says so
// however far apart the names are in the plan and however many lists are
// in flight. The intent's list holds the refunds of its charge, so a
// charge not yet listed when its intent is checked is never listed.
func TestStripeAuditOfAPaymentNamedBothWays(t *testing.T) {
	s := newSim(t, charges(50, nil))
	path := filepath.Join(t.TempDir(), "j.jsonl")
	plan := bothWaysPlan()
	for item, res := range refundRun(t, s, path, plan) {
		if res.Status != refund.StatusRefunded {
			t.Fatalf("refund: item %s %s (%s), want refunded", item, res.Status, res.Code)
		}
	}
	for _, tt := range []struct {
		workers, lists int
	}{{1, 51}, {8, 52}} {
		t.Run(fmt.Sprintf("workers=%d", tt.workers), func(t *testing.T) {
			s.Reset()
			got, rep := mustAudit(t, s, stripeAudit{plan: plan, journal: path, workers: tt.workers})
			wantFindings(t, "audit --stripe --plan", got)
			if !rep.Clean() || rep.ByStatus["refunded"] != 52 {
				t.Errorf("report %+v", rep)
			}
			if s.Lists() != int64(tt.lists) || rep.ListCalls() != int64(tt.lists) || s.Creates() != 0 || s.Calls(simtest.Cancel) != 0 {
				t.Errorf("%d lists (report %d), %d creates, %d cancels; want %d lists only", s.Lists(), rep.ListCalls(), s.Creates(), s.Calls(simtest.Cancel), tt.lists)
			}
		})
	}
	// Without the plan, by the journal's names alone: the same.
	got, _ := mustAudit(t, s, stripeAudit{journal: path, workers: 1})
	wantFindings(t, "audit --stripe", got)
}

// The findings of a payment named both ways are those of a payment named
// once, each said once: two refunds for one item are its duplicate (the
// extra canceled when it still can be), a refund of the batch for an item
// the plan does not list is unowned and beyond what the payment's planned
// items explain, and a refund of another batch is other_batch.
func TestStripeAuditOfAPaymentNamedBothWaysKeepsItsFindings(t *testing.T) {
	seed := func(batch, item, status string) stripesim.SeedRefund {
		return stripesim.SeedRefund{Amount: 300, Status: status, Metadata: meta(batch, item)}
	}
	for _, order := range []string{"charge first", "intent first"} {
		t.Run(order, func(t *testing.T) {
			s := newSim(t, charges(2, map[int][]stripesim.SeedRefund{1: {
				seed("b1", "a", "succeeded"),
				seed("b1", "b", "succeeded"),
				seed("b1", "b", "requires_action"),
				seed("b1", "gone", "succeeded"),
				seed("b2", "a", "succeeded"),
			}}))
			plan := line("a", "ch_a1") + line("b", "pi_a1")
			if order == "intent first" {
				plan = line("b", "pi_a1") + line("a", "ch_a1")
			}
			path := filepath.Join(t.TempDir(), "j.jsonl")
			got, rep := mustAudit(t, s, stripeAudit{plan: plan, journal: path, workers: 1, cancel: true, backfill: true})
			a := []string{"stripe_only a"}
			b := []string{"duplicate b", "stripe_only b"}
			want := append(a, b...)
			if order == "intent first" {
				want = append(b, a...)
			}
			want = append(want, "stripe_only gone", "duplicate @ch_a1pi_a1", "unowned @ch_a1pi_a1", "other_batch @ch_a1pi_a1")
			wantFindings(t, "audit --stripe --cancel-extras", got, want...)
			if f := find(got, audit.KindDuplicate, "b"); actions(f) != "succeeded:keep canceled:canceled" {
				t.Errorf("b's duplicate: %s", actions(f))
			}
			if rep.Canceled != 1 || s.Calls(simtest.Cancel) != 1 {
				t.Errorf("%d canceled, %d cancel calls; want b's extra only", rep.Canceled, s.Calls(simtest.Cancel))
			}
			if f := find(got, audit.KindUnowned, ""); f == nil || len(f.Refunds) != 1 || f.Refunds[0].Item != "gone" || f.Planned != 2 {
				t.Errorf("unowned: %+v", f)
			}
			// Backfilled and canceled under the names the items go by, and
			// an item the plan does not list under the charge refunded.
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				`"type":"refunded","ts":"[^"]+","batch":"b1","item":"a","charge":"ch_a1","attempt"`,
				`"type":"refunded","ts":"[^"]+","batch":"b1","item":"b","payment_intent":"pi_a1","attempt"`,
				`"type":"canceled","ts":"[^"]+","batch":"b1","item":"b","payment_intent":"pi_a1","attempt"`,
				`"type":"refunded","ts":"[^"]+","batch":"b1","item":"gone","charge":"ch_a1",`,
			} {
				if !regexp.MustCompile(want).Match(data) {
					t.Errorf("the journal has no line matching %s:\n%s", want, data)
				}
			}
			got, _ = mustAudit(t, s, stripeAudit{plan: plan, journal: path, workers: 1})
			wantFindings(t, "audit again", got, "not_in_plan gone", "duplicate @ch_a1pi_a1", "unowned @ch_a1pi_a1", "other_batch @ch_a1pi_a1")
		})
	}
}

// hiding is a provider that lists no refund under a payment intent, as a
// list made before the refunds were: the names of a payment cannot be
// joined then, and each is checked alone.
type hiding struct{ refund.Provider }

func (p hiding) Find(ctx context.Context, pay refund.Payment) ([]refund.Refund, error) {
	if pay.PaymentIntent != "" {
		return nil, nil
	}
	return p.Provider.Find(ctx, pay)
}

// refusing is a provider that will not list a payment intent's refunds.
type refusing struct{ refund.Provider }

func (p refusing) Find(ctx context.Context, pay refund.Payment) ([]refund.Refund, error) {
	if pay.PaymentIntent != "" {
		return nil, &refund.Failure{Class: refund.ClassFinal, Status: 400, Code: "parameter_invalid", Message: "no listing by intent", Err: fmt.Errorf("no listing by intent")}
	}
	return p.Provider.Find(ctx, pay)
}

// Names of one payment that could not be joined: the intent, checked
// first, listed nothing (its refunds came after), and its charge lists
// the intent's item's refund, which the plan puts on the intent: a
// partial refund of the same payment, not an extra of the charge's. What
// the intent's list lacked is said of its item.
func TestStripeAuditOfNamesThatCouldNotBeJoined(t *testing.T) {
	s := newSim(t, charges(1, nil))
	path := filepath.Join(t.TempDir(), "j.jsonl")
	plan := line("b", "pi_a1") + line("a", "ch_a1")
	refundRun(t, s, path, plan)
	got, _ := mustAudit(t, s, stripeAudit{plan: plan, journal: path, provider: func(p refund.Provider) refund.Provider { return hiding{p} }})
	wantFindings(t, "audit", got, "journal_only b")

	// The intent refused: the payment, joined by its charge's refunds, is
	// checked against the journal alone, and said so once, by both names.
	got, _ = mustAudit(t, s, stripeAudit{plan: line("a", "ch_a1") + line("b", "pi_a1"), journal: path,
		provider: func(p refund.Provider) refund.Provider { return refusing{p} }})
	wantFindings(t, "audit, intent refused", got, "unchecked @ch_a1pi_a1")
}
