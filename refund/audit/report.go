package audit

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/refundkit/refundkit/refund/money"
)

// Report counts what an audit saw and did.
type Report struct {
	Journals int    // journals read
	Records  int    // records read
	Items    int    // items of the plan and journals
	Provider string // the provider asked, by name; "" for none
	Told     bool   // its look-ups read what it told of (Adyen's notifications), not its API
	// ByStatus counts items by what the journal says: refunded, pending,
	// failed, in_doubt, or none (planned, never journaled).
	ByStatus map[string]int
	// Amounts sums per status and currency the refunds journaled or the
	// amounts requested; Full counts requests of the whole (adding 0).
	Amounts            map[string]money.Totals
	Full               map[string]int
	Findings           map[string]int // by kind
	ExtraJournal       int            // extra refunds the journals hold (without a provider)
	ExtraJournalAmount money.Totals
	Irreversible       int // extra refunds the provider cannot take back
	IrreversibleAmount money.Totals
	Cancelable         int // extras that still require action and were not canceled
	Canceled           int // extras this audit canceled
	CanceledAmount     money.Totals
	Backfilled         int  // refunded records written by --backfill
	Planned            bool // a plan was audited: without, a clean verdict cannot say the batch is done
	Complete           bool // checked everything asked: an audit halted or interrupted has no verdict

	listCalls, cancelCalls, chargeCalls atomic.Int64
}

func newReport() *Report {
	return &Report{
		ByStatus: map[string]int{}, Amounts: map[string]money.Totals{}, Full: map[string]int{},
		Findings: map[string]int{}, ExtraJournalAmount: money.Totals{},
		IrreversibleAmount: money.Totals{}, CanceledAmount: money.Totals{},
	}
}

// amounts is status's totals, made when first needed.
func (r *Report) amounts(status string) money.Totals {
	m := r.Amounts[status]
	if m == nil {
		m = money.Totals{}
		r.Amounts[status] = m
	}
	return m
}

// ListCalls, ChargeCalls and CancelCalls count the list, payment and
// cancel requests sent to the provider.
func (r *Report) ListCalls() int64   { return r.listCalls.Load() }
func (r *Report) ChargeCalls() int64 { return r.chargeCalls.Load() }
func (r *Report) CancelCalls() int64 { return r.cancelCalls.Load() }

// FindingCount is the number of findings of every kind.
func (r *Report) FindingCount() int {
	n := 0
	for _, c := range r.Findings {
		n += c
	}
	return n
}

// Clean reports a complete audit without findings.
func (r *Report) Clean() bool { return r.Complete && r.FindingCount() == 0 }

// Lines is the summary for people, one message per line: what was read,
// the amounts, the calls made, then the verdict (or the findings so far).
func (r *Report) Lines() []string {
	items := fmt.Sprintf("%s, %s, %s: %d refunded, %d failed, %d in doubt",
		count(r.Journals, "journal"), count(r.Records, "record"), count(r.Items, "item"),
		r.ByStatus["refunded"], r.ByStatus["failed"], r.ByStatus["in_doubt"])
	if n := r.ByStatus["pending"]; n > 0 {
		items += fmt.Sprintf(", %d pending", n)
	}
	if n := r.ByStatus["none"]; n > 0 {
		items += fmt.Sprintf(", %d not journaled", n)
	}
	lines := []string{items}
	for _, st := range [...]struct{ status, what string }{{"refunded", "refunded"}, {"pending", "pending (accepted, not finished)"},
		{"failed", "failed (requested)"}, {"in_doubt", "in doubt (requested)"}} {
		var parts []string
		if m := r.Amounts[st.status]; len(m) > 0 {
			parts = append(parts, amounts(m))
		}
		if n := r.Full[st.status]; n > 0 && st.status != "refunded" && st.status != "pending" {
			parts = append(parts, count(n, "full refund"))
		}
		if len(parts) > 0 {
			lines = append(lines, st.what+": "+strings.Join(parts, " + "))
		}
	}
	if r.Provider != "" {
		calls := []string{count(int(r.ListCalls()), "list call")}
		if r.Told {
			calls[0] = count(int(r.ListCalls()), "payment") + " looked up in its notifications (not its API)"
		}
		if n := r.ChargeCalls(); n > 0 {
			calls = append(calls, count(int(n), "charge call"))
		}
		calls = append(calls, count(int(r.CancelCalls()), "cancel call"), count(r.Backfilled, "refund")+" backfilled")
		lines = append(lines, strings.ToLower(r.Provider)+": "+strings.Join(calls, ", "))
	}
	if r.FindingCount() == 0 {
		if !r.Complete {
			return lines
		}
		verdict := "no findings: every audited item has exactly one refund"
		if r.Told {
			verdict += ", and no notification " + r.Provider + " sent tells of another; refunds it has not told of yet cannot be seen: audit again once every notification has arrived"
		}
		if !r.Planned {
			verdict += " (without --plan, only the items the journals name: audit --plan PLAN to know the batch is done)"
		}
		return append(lines, verdict)
	}
	var kinds []string
	for _, k := range Kinds {
		if n := r.Findings[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
		}
	}
	so := "findings: "
	if !r.Complete {
		so = "findings so far: "
	}
	lines = append(lines, so+strings.Join(kinds, ", "))
	if r.ExtraJournal > 0 {
		s := count(r.ExtraJournal, "extra refund") + " in the journals"
		if len(r.ExtraJournalAmount) > 0 {
			s += ", " + amounts(r.ExtraJournalAmount)
		}
		lines = append(lines, s+": audit --stripe tells which can still be canceled")
	}
	if r.Canceled > 0 {
		lines = append(lines, fmt.Sprintf("canceled %s (%s) and journaled the cancels", count(r.Canceled, "extra refund"), amounts(r.CanceledAmount)))
	}
	if r.Cancelable > 0 {
		lines = append(lines, fmt.Sprintf("%s still %s action and can be canceled: see the findings' remedies", count(r.Cancelable, "extra refund"), verb(r.Cancelable, "requires", "require")))
	}
	if r.Irreversible > 0 {
		lines = append(lines, fmt.Sprintf("%s succeeded and cannot be reversed through the API: %s was refunded twice, and to recover it the customers must be charged again",
			count(r.Irreversible, "extra refund"), amounts(r.IrreversibleAmount)))
	}
	return lines
}

// count says n of a thing for people: "1 item", "2 items", "0 items".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// verb is the form of a verb that agrees with n things.
func verb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
