package audit

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// Report counts what an audit saw and did.
type Report struct {
	Journals int // journals read
	Records  int // records read
	Items    int // items of the plan and journals
	Stripe   bool
	// ByStatus counts items by what the journal says: refunded, failed,
	// in_doubt, or none (planned, never journaled).
	ByStatus map[string]int
	// Amounts sums per status and currency: the refunds journaled
	// (refunded), the requested amounts (failed, in_doubt; a request for the
	// full remaining amount adds 0 and is counted in Full).
	Amounts map[string]map[string]int64
	Full    map[string]int
	// Findings counts findings by kind.
	Findings map[string]int
	// ExtraJournal counts extra refunds the journals hold (without Stripe).
	ExtraJournal       int
	ExtraJournalAmount map[string]int64
	// Irreversible counts extra refunds at Stripe that succeeded (or are
	// pending): the API cannot take them back.
	Irreversible       int
	IrreversibleAmount map[string]int64
	Cancelable         int // extras that still require action and were not canceled
	Canceled           int // extras this audit canceled
	CanceledAmount     map[string]int64
	Backfilled         int // refunded records written by --backfill

	listCalls, cancelCalls, chargeCalls atomic.Int64
}

func newReport() *Report {
	return &Report{
		ByStatus: map[string]int{}, Amounts: map[string]map[string]int64{}, Full: map[string]int{},
		Findings: map[string]int{}, ExtraJournalAmount: map[string]int64{},
		IrreversibleAmount: map[string]int64{}, CanceledAmount: map[string]int64{},
	}
}

func (r *Report) add(status, currency string, amount int64) {
	if amount == 0 {
		r.Full[status]++
		return
	}
	m := r.Amounts[status]
	if m == nil {
		m = map[string]int64{}
		r.Amounts[status] = m
	}
	m[currency] += amount
}

// ListCalls is the number of list requests sent to Stripe.
func (r *Report) ListCalls() int64 { return r.listCalls.Load() }

// ChargeCalls is the number of charges fetched from Stripe.
func (r *Report) ChargeCalls() int64 { return r.chargeCalls.Load() }

// CancelCalls is the number of cancel requests sent to Stripe.
func (r *Report) CancelCalls() int64 { return r.cancelCalls.Load() }

// FindingCount is the number of findings of every kind.
func (r *Report) FindingCount() int {
	n := 0
	for _, c := range r.Findings {
		n += c
	}
	return n
}

// Clean reports an audit without findings: every audited item has exactly
// one refund and nothing is in doubt.
func (r *Report) Clean() bool { return r.FindingCount() == 0 }

// Lines is the summary for people, one message per line.
func (r *Report) Lines() []string {
	var lines []string
	items := fmt.Sprintf("%d journals, %d records, %d items: %d refunded, %d failed, %d in doubt",
		r.Journals, r.Records, r.Items, r.ByStatus["refunded"], r.ByStatus["failed"], r.ByStatus["in_doubt"])
	if n := r.ByStatus["none"]; n > 0 {
		items += fmt.Sprintf(", %d not journaled", n)
	}
	lines = append(lines, items)
	for _, st := range []string{"refunded", "failed", "in_doubt"} {
		var parts []string
		if m := r.Amounts[st]; len(m) > 0 {
			parts = append(parts, amounts(m))
		}
		if n := r.Full[st]; n > 0 && st != "refunded" {
			parts = append(parts, fmt.Sprintf("%d full refunds", n))
		}
		if len(parts) > 0 {
			what := map[string]string{"refunded": "refunded", "failed": "failed (requested)", "in_doubt": "in doubt (requested)"}[st]
			lines = append(lines, what+": "+strings.Join(parts, " + "))
		}
	}
	if r.Stripe {
		calls := fmt.Sprintf("%d list and %d cancel calls", r.ListCalls(), r.CancelCalls())
		if n := r.ChargeCalls(); n > 0 {
			calls = fmt.Sprintf("%d list, %d charge and %d cancel calls", r.ListCalls(), n, r.CancelCalls())
		}
		lines = append(lines, fmt.Sprintf("stripe: %s, %d refunds backfilled", calls, r.Backfilled))
	}
	if r.Clean() {
		return append(lines, "no findings: every audited item has exactly one refund")
	}
	var kinds []string
	for _, k := range Kinds {
		if n := r.Findings[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
		}
	}
	lines = append(lines, "findings: "+strings.Join(kinds, ", "))
	if r.ExtraJournal > 0 {
		s := fmt.Sprintf("%d extra refunds in the journals", r.ExtraJournal)
		if len(r.ExtraJournalAmount) > 0 {
			s += ", " + amounts(r.ExtraJournalAmount)
		}
		lines = append(lines, s+": audit --stripe tells which can still be canceled")
	}
	if r.Canceled > 0 {
		lines = append(lines, fmt.Sprintf("canceled %d extra refunds (%s) and journaled the cancels", r.Canceled, amounts(r.CanceledAmount)))
	}
	if r.Cancelable > 0 {
		lines = append(lines, fmt.Sprintf("%d extra refunds still require action and can be canceled: see the findings' remedies", r.Cancelable))
	}
	if r.Irreversible > 0 {
		lines = append(lines, fmt.Sprintf("%d extra refunds succeeded and cannot be reversed through the API: %s was refunded twice, and to recover it the customers must be charged again",
			r.Irreversible, amounts(r.IrreversibleAmount)))
	}
	return lines
}
