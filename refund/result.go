package refund

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/refund/money"
)

// Statuses of a result line.
const (
	StatusRefunded = "refunded" // refunded now, or found already refunded at Stripe
	StatusSkipped  = "skipped"  // the journal already holds its refund: no API call
	StatusFailed   = "failed"   // Stripe refused it for good (now or in an earlier run)
	StatusInDoubt  = "in_doubt" // not settled: a later run reconciles it first
	StatusPending  = "pending"  // the provider accepted its refund and has not finished it
	// The statuses of a dry run, which sends and journals nothing: what
	// the real run would do.
	StatusWould      = "would_refund"    // it would send a create (amount and currency as known)
	StatusWouldRec   = "would_reconcile" // offline: in doubt in the journal; the real run looks it up first
	StatusWouldAdopt = "would_adopt"     // the look-up finds its own refund: journaled without a call
	StatusWouldHold  = "would_hold"      // a refund made elsewhere on its payment holds it (the code says whose)
	StatusWouldFail  = "would_fail"      // the real run would fail it (the code says why)
)

// Codes of the results and journal records an item's life writes.
const (
	CodeRefundedByOtherBatch = "refunded_by_other_batch"    // a live refund of another batch holds the item
	CodeRefundedOutside      = "refunded_outside_refundkit" // one without refundkit metadata does (AllRefunds)
	CodeRefundedUnattributed = "refunded_unattributed"      // one whose maker cannot be told does
	CodeRefundedByOtherItem  = "refunded_by_other_item"     // one of this batch for an item the plan puts elsewhere does
	CodeDuplicateRefunds     = "duplicate_refunds"          // more than one live refund for the item: one kept, all journaled
	CodeAnswerMismatch       = "answer_mismatch"            // an answer that is not the item's refund: the run halts
	CodeSharedRefund         = "shared_refund"              // the journal credits its refund to another item too
	CodeAmountDiffers        = "refund_amount_differs"      // its own refund is of another amount than the plan's
	CodeCurrencyDiffers      = "currency_differs"           // the payment or its refund is in another currency
	CodeLookupFailed         = "lookup_failed"              // the look-up failed: nothing sent or journaled
	CodeNoLookup             = "no_lookup"                  // in doubt, no look-up, its key maybe forgotten: a person checks
)

// IsHold reports a failure code that holds an item for a refund made
// elsewhere on its payment: AllowRefundedCharges lifts it.
func IsHold(code string) bool {
	return code == CodeRefundedByOtherBatch || code == CodeRefundedOutside || code == CodeRefundedByOtherItem ||
		code == CodeRefundedUnattributed
}

// Kinds of dry run (Summary.Dry).
const (
	DryLookup  = "lookup"  // items looked up at the provider, read only
	DryOffline = "offline" // the checkpoint alone, no look-up
)

// Result is the line refund prints for an item once its outcome is journaled.
type Result struct {
	Batch         string `json:"batch"`
	Item          string `json:"item"`
	Charge        string `json:"charge,omitempty"`
	PaymentIntent string `json:"payment_intent,omitempty"`
	Capture       string `json:"capture,omitempty"`
	PSPReference  string `json:"psp_reference,omitempty"`
	Status        string `json:"status"`
	Refund        string `json:"refund,omitempty"`
	Amount        int64  `json:"amount,omitempty"`
	Currency      string `json:"currency,omitempty"`
	Attempt       int    `json:"attempt,omitempty"`
	Found         bool   `json:"found,omitempty"` // found at the provider, not made by this run
	Code          string `json:"code,omitempty"`
	Message       string `json:"message,omitempty"`
}

func newResult(it *Item, status string) Result {
	return Result{Batch: it.Batch, Item: it.Item, Charge: it.Charge, PaymentIntent: it.PaymentIntent, Capture: it.Capture, PSPReference: it.PSPReference, Status: status}
}

// Summary counts what a run did.
type Summary struct {
	Provider string // in the summary ("Stripe"); "" is "the provider"
	Items    int
	ByStatus map[string]int
	Refunded money.Totals // refunded in this run, per currency
	Found    money.Totals // found at the provider and adopted: refunded earlier
	// Calls by what they ask: creates, reads of a payment, lists of a
	// payment's refunds (the look-ups), reads of one refund.
	CreateCalls, PaymentReads, RefundLists, RefundReads int64
	RefundsTold                                         int64  // refunds read from the provider's events instead (Teller)
	EventsContradicting                                 int64  // told refunds that contradict the journal: asked instead
	Lookup                                              string // names one of RefundLists when not a refund list (Facts.LookupName)
	ListRequests                                        int64  // what RefundLists sent, when one is more than one request; else 0
	RateLimited                                         int64  // 429 answers
	Retries                                             int64  // calls repeated with the same key
	Reconciled                                          int64  // in-doubt items settled by listing the charge's refunds
	NewKeys                                             int64  // attempts that needed a new idempotency key
	Duplicates                                          int64  // items Stripe holds more than one live refund for
	Indeterminate                                       int64  // items left in doubt by the provider's own 500
	OtherShards                                         int    // the plan's items of other shards, read and not worked
	Dry                                                 string // the kind of dry run (DryLookup, DryOffline); "" for a real run
	// WouldRefund sums what would_refund items would refund, per currency
	// ("": offline, a plan that names none); WouldUnknown counts those of
	// an amount not known. WouldAdopt sums the refunds a dry run found.
	WouldRefund  money.Totals
	WouldUnknown int
	WouldAdopt   money.Totals
	Records      int64 // journal records written
	Fsyncs       int64
	HaltedReason string
	// Overflow is the first total beyond int64 (a *money.TotalError): String
	// says so, never a wrapped total, and refund exits 2; the run goes on.
	Overflow error
	over     map[string]bool // what+"/"+currency of the totals beyond int64
}

func (s *Summary) add(r Result) {
	s.Items++
	s.ByStatus[r.Status]++
	if r.Code == CodeDuplicateRefunds {
		s.Duplicates++
	}
	switch {
	case r.Status == StatusRefunded && r.Amount > 0:
		if r.Found {
			s.sum(&s.Found, sumFound, r)
		} else {
			s.sum(&s.Refunded, sumRefunded, r)
		}
	case r.Status == StatusWould && r.Amount <= 0:
		s.WouldUnknown++
	case r.Status == StatusWould:
		s.sum(&s.WouldRefund, sumWouldRefund, r)
	case r.Status == StatusWouldAdopt && r.Amount > 0:
		s.sum(&s.WouldAdopt, sumWouldAdopt, r)
	}
}

// The totals of a summary, as an overflow names them.
const (
	sumRefunded    = "refunded"
	sumFound       = "found"
	sumWouldRefund = "would refund"
	sumWouldAdopt  = "would adopt"
)

// sum adds r's amount to the total what; one beyond int64 is kept out of
// the sums from then on (Overflow).
func (s *Summary) sum(t *money.Totals, what string, r Result) {
	if *t == nil {
		*t = money.Totals{}
	}
	key := what + "/" + r.Currency
	if s.over[key] {
		return
	}
	err := t.Add(r.Currency, r.Amount)
	var oe *money.OverflowError
	if !errors.As(err, &oe) {
		return
	}
	if s.over == nil {
		s.over = map[string]bool{}
	}
	s.over[key] = true
	if s.Overflow == nil {
		s.Overflow = &money.TotalError{What: "the " + what + " total", Where: fmt.Sprintf("item %s of batch %s", r.Item, r.Batch), Err: oe}
	}
}

// sums is t without the totals beyond int64, for a log record.
func (s *Summary) sums(t money.Totals, what string) money.Totals {
	if len(s.over) == 0 {
		return t
	}
	out := money.Totals{}
	for c, n := range t {
		if !s.over[what+"/"+c] {
			out[c] = n
		}
	}
	return out
}

// statusOrder is the order String names statuses in; statusAlways those it
// names even at 0, by the kind of run.
var (
	statusOrder = []string{StatusRefunded, StatusSkipped, StatusFailed, StatusInDoubt, StatusPending,
		StatusWould, StatusWouldAdopt, StatusWouldHold, StatusWouldFail, StatusWouldRec}
	statusAlways = map[string][]string{
		"":         {StatusRefunded, StatusSkipped, StatusFailed, StatusInDoubt},
		DryLookup:  {StatusSkipped, StatusFailed, StatusInDoubt, StatusWould, StatusWouldAdopt, StatusWouldHold, StatusWouldFail},
		DryOffline: {StatusSkipped, StatusFailed, StatusInDoubt, StatusWould},
	}
)

func orEmpty(m money.Totals) money.Totals {
	if m == nil {
		return money.Totals{}
	}
	return m
}

// String is the one-paragraph summary printed on stderr, amounts as money.
func (s *Summary) String() string {
	var b strings.Builder
	provider := cmp.Or(s.Provider, "the provider")
	switch s.Dry {
	case DryLookup:
		fmt.Fprintf(&b, "dry run, looked up at %s (nothing sent, nothing journaled): ", provider)
	case DryOffline:
		b.WriteString("dry run, offline (the journal alone, no look-up at the provider): ")
	}
	fmt.Fprintf(&b, "%d %s", s.Items, plural(s.Items, "item"))
	if s.OtherShards > 0 {
		fmt.Fprintf(&b, " (and %d of other shards, read and not worked)", s.OtherShards)
	}
	b.WriteByte(':')
	sep := ""
	for _, st := range statusOrder {
		if n := s.ByStatus[st]; n > 0 || slices.Contains(statusAlways[s.Dry], st) {
			fmt.Fprintf(&b, "%s %d %s", sep, n, st)
			sep = ","
		}
	}
	for _, sum := range []struct {
		what, key string
		amounts   money.Totals
	}{{"refunded", sumRefunded, s.Refunded}, {"found at " + provider + " (refunded earlier)", sumFound, s.Found},
		{"would refund", sumWouldRefund, s.WouldRefund}, {"would adopt", sumWouldAdopt, s.WouldAdopt}} {
		for _, c := range slices.Sorted(maps.Keys(sum.amounts)) {
			if s.over[sum.key+"/"+c] {
				fmt.Fprintf(&b, "; %s more than %s (beyond what an int64 of minor units holds)", sum.what, money.Format(math.MaxInt64, c))
				continue
			}
			if c == "" {
				// Offline, a plan that names no currency: the payment's.
				fmt.Fprintf(&b, "; %s %d minor units in the currency of the payments (the plan names none)", sum.what, sum.amounts[c])
				continue
			}
			fmt.Fprintf(&b, "; %s %s", sum.what, money.Format(sum.amounts[c], c))
			if sum.what == "would adopt" {
				fmt.Fprintf(&b, " (refunded earlier at %s)", provider)
			}
		}
	}
	if s.WouldUnknown > 0 {
		fmt.Fprintf(&b, "; %d would_refund %s of an amount not known (the rest of the payment)", s.WouldUnknown, plural(s.WouldUnknown, "item"))
	}
	if s.Dry != DryOffline {
		fmt.Fprintf(&b, "; %d creates, %d payment reads, %s, %d refund reads, %d retried, %d rate-limited", s.CreateCalls, s.PaymentReads, s.lookups(), s.RefundReads, s.Retries, s.RateLimited)
	}
	if s.Dry == "" {
		fmt.Fprintf(&b, ", %d reconciled, %d new keys; %d journal records in %d fsyncs", s.Reconciled, s.NewKeys, s.Records, s.Fsyncs)
	}
	if s.RefundsTold > 0 {
		fmt.Fprintf(&b, "; %d %s settled by %s's events, with no request", s.RefundsTold, plural(int(s.RefundsTold), "refund"), s.Provider)
	}
	if s.EventsContradicting > 0 {
		fmt.Fprintf(&b, "; %d %s whose events contradict the journal (they settled nothing; %s was asked)", s.EventsContradicting, plural(int(s.EventsContradicting), "refund"), s.Provider)
	}
	if s.ListRequests > 0 {
		fmt.Fprintf(&b, "; a refund list is %d requests at %s: %d refund list requests", s.ListRequests/max(s.RefundLists, 1), s.Provider, s.ListRequests)
	}
	return b.String()
}

// lookups counts the look-ups as the summary line says them.
func (s *Summary) lookups() string {
	if s.Lookup == "" {
		return fmt.Sprintf("%d refund lists", s.RefundLists)
	}
	return fmt.Sprintf("%d %s", s.RefundLists, plural(int(s.RefundLists), s.Lookup))
}

// LogAttrs is the summary as a log record's fields (--log-format json).
func (s *Summary) LogAttrs() []any {
	by := make(map[string]int, len(s.ByStatus))
	maps.Copy(by, s.ByStatus)
	lookups := []any{"refund_lists", s.RefundLists, "refund_list_requests", max(s.ListRequests, s.RefundLists)}
	if s.Lookup != "" {
		// Not requests to the provider: no request count.
		lookups = []any{strings.NewReplacer("-", "", " ", "_").Replace(s.Lookup) + "s", s.RefundLists}
	}
	attrs := []any{"items", s.Items, "by_status", by,
		"refunded_minor_units", s.sums(s.Refunded, sumRefunded), "found_minor_units", s.sums(s.Found, sumFound),
		"create_calls", s.CreateCalls, "payment_reads", s.PaymentReads}
	attrs = append(attrs, lookups...)
	attrs = append(attrs, "refund_reads", s.RefundReads, "retried", s.Retries,
		"rate_limited", s.RateLimited, "reconciled", s.Reconciled, "new_keys", s.NewKeys,
		"duplicates", s.Duplicates, "indeterminate", s.Indeterminate,
		"journal_records", s.Records, "fsyncs", s.Fsyncs)
	if s.Provider != "" {
		attrs = append(attrs, "provider", s.Provider)
	}
	if s.RefundsTold > 0 {
		attrs = append(attrs, "refunds_told_by_events", s.RefundsTold)
	}
	if s.EventsContradicting > 0 {
		attrs = append(attrs, "events_contradicting", s.EventsContradicting)
	}
	if s.OtherShards > 0 {
		attrs = append(attrs, "other_shards", s.OtherShards)
	}
	if s.Dry != "" {
		attrs = append(attrs, "dry_run", s.Dry, "would_refund_minor_units", orEmpty(s.sums(s.WouldRefund, sumWouldRefund)),
			"would_refund_unknown_amount", s.WouldUnknown, "would_adopt_minor_units", orEmpty(s.sums(s.WouldAdopt, sumWouldAdopt)))
	}
	if s.Overflow != nil {
		attrs = append(attrs, "overflow", s.Overflow.Error())
	}
	if s.HaltedReason != "" {
		attrs = append(attrs, "halted", s.HaltedReason)
	}
	return attrs
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// AppendJSON appends r as one JSON line: what encoding/json writes, without
// its reflection, for the million-line resume.
func (r *Result) AppendJSON(b []byte) []byte {
	b = appendJSONString(append(b, `{"batch":`...), r.Batch)
	b = appendJSONString(append(b, `,"item":`...), r.Item)
	b = appendOpt(b, `,"charge":`, r.Charge, `,"payment_intent":`, r.PaymentIntent, `,"capture":`, r.Capture, `,"psp_reference":`, r.PSPReference)
	b = appendJSONString(append(b, `,"status":`...), r.Status)
	b = appendOpt(b, `,"refund":`, r.Refund)
	if r.Amount != 0 {
		b = strconv.AppendInt(append(b, `,"amount":`...), r.Amount, 10)
	}
	b = appendOpt(b, `,"currency":`, r.Currency)
	if r.Attempt != 0 {
		b = strconv.AppendInt(append(b, `,"attempt":`...), int64(r.Attempt), 10)
	}
	if r.Found {
		b = append(b, `,"found":true`...)
	}
	return append(appendOpt(b, `,"code":`, r.Code, `,"message":`, r.Message), '}', '\n')
}

// appendOpt appends each key and value pair whose value is not empty.
func appendOpt(b []byte, kv ...string) []byte {
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] != "" {
			b = appendJSONString(append(b, kv[i]...), kv[i+1])
		}
	}
	return b
}

// appendJSONString writes s as a JSON string, as encoding/json would.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
