package refund

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
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
	// CodeRefundedByOtherBatch: the charge holds a live refund of another
	// refundkit batch; the item is held, nothing is sent.
	CodeRefundedByOtherBatch = "refunded_by_other_batch"
	// CodeRefundedOutside: the charge holds a live refund without refundkit
	// metadata and AllRefunds asks to hold such items.
	CodeRefundedOutside = "refunded_outside_refundkit"
	// CodeRefundedUnattributed: the charge holds a live refund whose maker
	// cannot be told (Refund.Unattributed); the item is held.
	CodeRefundedUnattributed = "refunded_unattributed"
	// CodeDuplicateRefunds: the provider holds more than one live refund
	// for the item; one is kept, the others journaled and reported.
	CodeDuplicateRefunds = "duplicate_refunds"
	// CodeRefundedByOtherItem: the charge holds a live refund of this batch
	// for an item the plan does not put on this payment (renamed, dropped,
	// moved); the item is held.
	CodeRefundedByOtherItem = "refunded_by_other_item"
	// CodeAnswerMismatch: the provider answered with a refund that is not
	// the item's; the run halts.
	CodeAnswerMismatch = "answer_mismatch"
	// CodeSharedRefund: the journal credits the item's refund to another
	// item too; nothing sent until a person mends it.
	CodeSharedRefund = "shared_refund"
	// CodeAmountDiffers: the item's own refund is of another amount than
	// the plan's, or a full refund's payment does not add up.
	CodeAmountDiffers = "refund_amount_differs"
	// CodeCurrencyDiffers: the payment or the item's refund is in another
	// currency than the plan says; nothing is sent.
	CodeCurrencyDiffers = "currency_differs"
	// CodeLookupFailed: the payment's refunds could not be listed; nothing
	// sent or journaled, the next run tries again.
	CodeLookupFailed = "lookup_failed"
	// CodeNoLookup: an item in doubt the provider cannot look up and whose
	// key it may have forgotten; nothing is sent, a person checks.
	CodeNoLookup = "no_lookup"
)

// heldCode reports a failure that is a hold for a refund made elsewhere on
// the charge, which AllowRefundedCharges lifts.
func heldCode(code string) bool {
	return code == CodeRefundedByOtherBatch || code == CodeRefundedOutside || code == CodeRefundedByOtherItem ||
		code == CodeRefundedUnattributed
}

// Kinds of dry run (Summary.Dry).
const (
	DryLookup  = "lookup"  // items looked up at the provider, read only
	DryOffline = "offline" // the checkpoint alone, no look-up
)

// Result is the line refund prints on stdout for an item once its outcome
// is journaled.
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
	// Found: the refund was found at Stripe (made by an earlier run, under
	// another journal), not made by this run.
	Found   bool   `json:"found,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

func newResult(it *Item, status string) Result {
	return Result{Batch: it.Batch, Item: it.Item, Charge: it.Charge, PaymentIntent: it.PaymentIntent, Capture: it.Capture, PSPReference: it.PSPReference, Status: status}
}

// Summary counts what a run did.
type Summary struct {
	// Provider names the provider in the summary ("Stripe"); "" is "the
	// provider".
	Provider string
	Items    int
	ByStatus map[string]int
	// Refunded sums the amounts refunded in this run, per currency.
	Refunded money.Totals
	// Found sums the refunds found at Stripe and adopted, per currency:
	// money an earlier run refunded.
	Found       money.Totals
	CreateCalls int64
	ListCalls   int64
	// Lookup names one of ListCalls when it is not a call of a list API
	// (Facts.LookupName); "" is a list call.
	Lookup string
	// ListRequests is what ListCalls sent, when a look-up is more than
	// one request (Facts.LookupRequests); 0 when each is one.
	ListRequests int64
	RateLimited  int64 // 429 answers
	Retries      int64 // calls repeated with the same key
	Reconciled   int64 // in-doubt items settled by listing the charge's refunds
	NewKeys      int64 // attempts that needed a new idempotency key
	Duplicates   int64 // items Stripe holds more than one live refund for
	// Indeterminate counts items left in doubt by Stripe's own 500.
	Indeterminate int64
	// OtherShards counts the plan's items of other shards, read and not
	// worked (Config.Shard).
	OtherShards int
	// Dry names the kind of dry run (DryLookup, DryOffline); "" for a
	// real run.
	Dry string
	// WouldRefund sums, per currency, the amounts a dry run's would_refund
	// items would refund ("": the plan's amounts of items that name no
	// currency, offline); WouldUnknown counts those whose amount is not
	// known (a full refund, offline or where the provider cannot say the
	// rest of the payment).
	WouldRefund  money.Totals
	WouldUnknown int
	// WouldAdopt sums the refunds a dry run found for its items, which the
	// real run would adopt: money an earlier run refunded.
	WouldAdopt   money.Totals
	Records      int64 // journal records written
	Fsyncs       int64
	HaltedReason string
	// Overflow is the first total that went beyond what an int64 of minor
	// units holds (a *money.TotalError naming the item): String says that
	// total is beyond int64, never a wrapped or partial one, and refund
	// exits 2. The run goes on: every refund is journaled as ever.
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

// sum adds r's amount to the total what, checked: a total beyond int64
// is kept out of the summary's sums from then on (Overflow).
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

// statusOrder is the order String names statuses in, and always those it
// names even at 0, by the kind of run (Summary.Dry): a real run never
// says would_*, nor a dry run refunded.
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
// A dry run's starts by saying which kind it is, names the statuses a dry
// run emits and the money that would move, and no journal counts.
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
		cur := make([]string, 0, len(sum.amounts))
		for c := range sum.amounts {
			cur = append(cur, c)
		}
		sort.Strings(cur)
		for _, c := range cur {
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
	switch s.Dry {
	case DryLookup:
		fmt.Fprintf(&b, "; %d create and %s, %d retried, %d rate-limited", s.CreateCalls, s.lookups(), s.Retries, s.RateLimited)
	case DryOffline:
	default:
		fmt.Fprintf(&b, "; %d create and %s, %d retried, %d rate-limited, %d reconciled, %d new keys; %d journal records in %d fsyncs",
			s.CreateCalls, s.lookups(), s.Retries, s.RateLimited, s.Reconciled, s.NewKeys, s.Records, s.Fsyncs)
	}
	if s.ListRequests > 0 {
		fmt.Fprintf(&b, "; a list call is %d requests at %s: %d list requests", s.ListRequests/max(s.ListCalls, 1), s.Provider, s.ListRequests)
	}
	return b.String()
}

// lookups counts the look-ups as the summary line says them.
func (s *Summary) lookups() string {
	if s.Lookup == "" {
		return fmt.Sprintf("%d list calls", s.ListCalls)
	}
	return fmt.Sprintf("%d %s", s.ListCalls, plural(int(s.ListCalls), s.Lookup))
}

// LogAttrs is the summary as a log record's fields (--log-format json):
// the counts String says, amounts in minor units by currency.
func (s *Summary) LogAttrs() []any {
	by := make(map[string]int, len(s.ByStatus))
	for st, n := range s.ByStatus {
		by[st] = n
	}
	lookups := []any{"list_calls", s.ListCalls, "list_requests", max(s.ListRequests, s.ListCalls)}
	if s.Lookup != "" {
		// Not requests to the provider: no request count.
		lookups = []any{strings.NewReplacer("-", "", " ", "_").Replace(s.Lookup) + "s", s.ListCalls}
	}
	attrs := []any{"items", s.Items, "by_status", by,
		"refunded_minor_units", s.sums(s.Refunded, sumRefunded), "found_minor_units", s.sums(s.Found, sumFound),
		"create_calls", s.CreateCalls}
	attrs = append(attrs, lookups...)
	attrs = append(attrs, "retried", s.Retries,
		"rate_limited", s.RateLimited, "reconciled", s.Reconciled, "new_keys", s.NewKeys,
		"duplicates", s.Duplicates, "indeterminate", s.Indeterminate,
		"journal_records", s.Records, "fsyncs", s.Fsyncs)
	if s.Provider != "" {
		attrs = append(attrs, "provider", s.Provider)
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

// AppendJSON appends r as one JSON line, newline included: the same object
// encoding/json writes, without its reflection, for the million-line resume.
func (r *Result) AppendJSON(b []byte) []byte {
	b = append(b, `{"batch":`...)
	b = appendJSONString(b, r.Batch)
	b = append(b, `,"item":`...)
	b = appendJSONString(b, r.Item)
	b = appendOptString(b, `,"charge":`, r.Charge)
	b = appendOptString(b, `,"payment_intent":`, r.PaymentIntent)
	b = appendOptString(b, `,"capture":`, r.Capture)
	b = appendOptString(b, `,"psp_reference":`, r.PSPReference)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, r.Status)
	b = appendOptString(b, `,"refund":`, r.Refund)
	if r.Amount != 0 {
		b = append(b, `,"amount":`...)
		b = strconv.AppendInt(b, r.Amount, 10)
	}
	b = appendOptString(b, `,"currency":`, r.Currency)
	if r.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(r.Attempt), 10)
	}
	if r.Found {
		b = append(b, `,"found":true`...)
	}
	b = appendOptString(b, `,"code":`, r.Code)
	b = appendOptString(b, `,"message":`, r.Message)
	return append(b, '}', '\n')
}

func appendOptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendJSONString(append(b, key...), s)
}

// appendJSONString writes s as a JSON string; plain ASCII is copied as it
// is, anything else goes through encoding/json for exactly its escaping.
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
