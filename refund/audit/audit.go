// Package audit tells whether a batch was refunded exactly once. It reads
// journals (and a plan) into compact per-item state and reports findings:
// items refunded twice, in doubt, failed, in conflict, missing or not
// planned, charges refunded by more than one batch, and torn journal
// tails. With Stripe it lists the refunds of every charge and compares them
// with the journal; it can backfill the refunds the journal lacks, so that a
// later refund run skips them, and cancel extra refunds that Stripe can
// still cancel. A refund is an item's by its metadata; one without metadata
// only when it is exactly what the item asked for and nothing else matches.
package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/money"
)

// Auditor gathers a plan and journals, then reports findings with Run.
// It is not safe for concurrent use.
type Auditor struct {
	st       *state
	torn     []*journal.Torn
	journals int
	records  int
	held     []string // journals a running refund holds, as named
}

// New returns an Auditor with nothing read yet.
func New() *Auditor { return &Auditor{st: newState()} }

// AddPlan reads plan items (refund.Item JSON lines, blank lines skipped)
// from r, named name in errors, with refund's own reader. A line that is
// not a valid item, or an item listed twice, is a *refund.InputError.
func (a *Auditor) AddPlan(r io.Reader, name string) error {
	a.st.planned = true
	items := refund.NewItemReader(r, name)
	for {
		it, line, err := items.Next()
		switch {
		case err == io.EOF:
			return nil
		case err != nil:
			if _, ok := err.(*refund.InputError); ok {
				return err
			}
			return fmt.Errorf("%s: %w", name, err)
		}
		if !a.st.addPlanItem(it.Batch, it.Item, refund.Payment{Charge: it.Charge, PaymentIntent: it.PaymentIntent, Capture: it.Capture, PSPReference: it.PSPReference}, it.Amount, it.Currency, origin{name, line}) {
			return &refund.InputError{Name: name, Line: line, Err: fmt.Errorf("item %q of batch %q is listed twice", it.Item, it.Batch)}
		}
	}
}

// AddJournal reads every record of a journal from r, named name in
// messages. Journals are folded in the order they are added. A torn final
// line is returned and becomes a torn_tail finding; a corrupt line
// (*journal.CorruptError) or an unknown version is an error naming the file
// and line, and the audit cannot go on.
func (a *Auditor) AddJournal(r io.Reader, name string) (*journal.Torn, error) {
	a.journals++
	if f, ok := r.(*os.File); ok {
		if info, err := f.Stat(); err == nil && info.Mode().IsRegular() {
			a.st.reserve(journal.ItemsIn(info.Size()))
		}
	}
	n, torn, err := scanJournal(r, name, a.st)
	a.records += n
	if err != nil {
		return nil, err
	}
	if torn != nil {
		a.torn = append(a.torn, torn)
	}
	return torn, nil
}

// AddHeldJournal is AddJournal for a journal that a running refund holds
// (journal.Held): its items in doubt may be in flight, not lost, and their
// findings say so.
func (a *Auditor) AddHeldJournal(r io.Reader, name string) (*journal.Torn, error) {
	a.held = append(a.held, name)
	a.st.live = true
	defer func() { a.st.live = false }()
	return a.AddJournal(r, name)
}

// Empty reports an Auditor with nothing to audit: no plan item, no journal
// record, no torn tail. Its audit would find nothing and prove nothing.
func (a *Auditor) Empty() bool { return a.st.n == 0 && a.records == 0 && len(a.torn) == 0 }

// AddTorn reports a torn tail that journal.Open cut off (and saved aside)
// before the journal was read.
func (a *Auditor) AddTorn(t *journal.Torn) { a.torn = append(a.torn, t) }

// Options say how far Run goes beyond the journals.
type Options struct {
	// Provider, when set, is asked for the refunds of every charge and
	// payment intent of the plan and journals (refund/provider/stripe).
	Provider refund.Provider
	// AllRefunds counts refunds without refundkit metadata (made by older
	// scripts or by hand) as refunds of the batch. Such a refund is an
	// item's, and is backfilled as its, only when it is exactly what the
	// item asked for (the planned amount; for a full refund, the charge's
	// whole amount), the item has no refund whose metadata names it, and no
	// other such refund or item matches either; any other is reported as
	// unattributed. Refunds whose metadata names another batch are never
	// an item's; they are reported as other_batch.
	AllRefunds bool
	// Charges fetches a charge whose amount tells whether a refund without
	// metadata is a full refund; nil: the Provider, if it can, else such a
	// refund never matches a full-refund item.
	Charges ChargeGetter
	// Pacer paces every API call; nil means unlimited.
	Pacer *refund.Pacer
	// Workers is how many lists are in flight at once (default 4).
	Workers int
	// Backfill, when set, receives a refunded record (source backfill) for
	// every refund Stripe has for an item and the journal lacks.
	Backfill *journal.Writer
	// CancelExtras cancels the extra refunds Stripe can still cancel
	// (requires_action), keeping one refund per item, and journals each
	// cancel in Actions.
	CancelExtras bool
	Actions      *journal.Writer
	// Retry spaces retries of a call the provider did not answer (429, 409,
	// 5xx, network; default: its Facts.Backoff); after MaxTries tries it
	// counts as unreachable.
	Retry    refund.Backoff
	MaxTries int
	// Now is the clock for journal records and the age of pending refunds
	// (default time.Now).
	Now func() time.Time
	// PendingAfter is how long a refund may stay pending before it is a
	// finding (KindPending); 0 is DefaultPendingAfter.
	PendingAfter time.Duration
	// Told are refunds the provider told of on its own (Adyen's
	// notifications), beyond those of the payments audited: a live one
	// naming an audited batch for an item no journal or plan knows is a
	// finding (a journal lost, an item renamed).
	Told []refund.Refund
}

// DefaultPendingAfter is how long a refund may stay pending unreported:
// PayPal's eCheck refunds take up to about a week to clear.
const DefaultPendingAfter = 7 * 24 * time.Hour

// StripeError is an audit stopped because Stripe refused the key or could
// not be reached: what Stripe holds is unknown, so nothing can be concluded.
type StripeError struct{ Err error }

func (e *StripeError) Error() string { return e.Err.Error() }
func (e *StripeError) Unwrap() error { return e.Err }

// JournalError is a backfill or cancel record that could not be written.
// The audit stopped there: no call was made after it.
type JournalError struct{ Err error }

func (e *JournalError) Error() string { return fmt.Sprintf("journal write failed: %v", e.Err) }
func (e *JournalError) Unwrap() error { return e.Err }

// Run reports every finding to emit, in a stable order (torn tails, then
// items in the order first read, then per charge), and returns the counts.
// The error is a *StripeError, a *JournalError or ctx's error; the report
// then covers what was checked before it. A sum beyond int64 is a
// *money.TotalError, and no report: no total can be told past it. A plan whose batches the
// journals share none of is a *BatchMismatchError, and no report: nothing
// is checked.
func (a *Auditor) Run(ctx context.Context, opts Options, emit func(*Finding)) (*Report, error) {
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.MaxTries <= 0 {
		opts.MaxTries = 8
	}
	if opts.Retry == (refund.Backoff{}) && opts.Provider != nil {
		opts.Retry = opts.Provider.Facts().Backoff
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PendingAfter <= 0 {
		opts.PendingAfter = DefaultPendingAfter
	}
	if opts.CancelExtras && opts.Actions == nil {
		opts.Actions = opts.Backfill
	}
	if opts.CancelExtras && opts.Actions == nil {
		return nil, errors.New("audit: cancel-extras needs a journal to record the cancels in")
	}
	if opts.Charges == nil && opts.Provider != nil {
		opts.Charges = opts.Provider
	}
	// Another batch's plan is one mistake, said once, not a finding for
	// every item of both.
	if err := a.st.batchMismatch(); err != nil {
		return nil, err
	}
	rep := newReport()
	rep.Journals, rep.Records, rep.Items = a.journals, a.records, int(a.st.n)
	rep.Planned = a.st.planned
	if opts.Provider != nil {
		rep.Provider = opts.Provider.Facts().Name
		rep.Told = opts.Provider.Facts().PartialLookup
	}
	var r *run
	r = &run{Auditor: a, opts: opts, rep: rep, charges: map[string]chargeInfo{}, out: func(f *Finding) {
		if r.overflow.Load() != nil {
			return // f may hold the sum that overflowed
		}
		rep.Findings[f.Finding]++
		emit(f)
	}}
	for _, t := range a.torn {
		r.out(tornFinding(t))
	}
	r.itemPass()
	if e := r.overflow.Load(); e != nil {
		return nil, e
	}
	if opts.Provider != nil || a.st.planned {
		// Groups of items on one charge matter with a plan (items it does not
		// list may hold a planned charge's refunds) and with Stripe (refunds
		// are listed per charge); without either, each item's own checks
		// find every duplicate, and grouping a million items is spared.
		a.st.groupItems()
	}
	// The state is only read from here on: the refund ids are indexed
	// beside the other passes, and their findings come last.
	shared := r.startShared()
	if opts.Provider == nil {
		r.journalPass()
		r.otherBatchPass()
		shared()
		if e := r.overflow.Load(); e != nil {
			return nil, e
		}
		rep.Complete = true
		return rep, nil
	}
	err := r.stripePass(ctx)
	if err == nil {
		r.toldPass()
	}
	shared()
	if e := r.overflow.Load(); e != nil {
		return nil, e
	}
	rep.Complete = err == nil
	return rep, err
}

func tornFinding(t *journal.Torn) *Finding {
	f := &Finding{Finding: KindTornTail, File: t.Path, Line: t.Line, Offset: t.Offset, Bytes: t.Bytes, Message: t.String()}
	if t.SavedTo != "" {
		f.Remedy = "the record a crash was writing was cut off and saved to " + t.SavedTo + "; if it was an outcome, its item is in doubt and the next refund run reconciles it with Stripe"
	} else {
		f.Remedy = "a crash cut the record it was writing; the next refund run over this journal saves the bytes aside and cuts them; if it was an outcome, its item is in doubt and that run reconciles it with Stripe"
	}
	return f
}

// run is one Run.
type run struct {
	*Auditor
	opts    Options
	rep     *Report
	out     func(*Finding)
	charges map[string]chargeInfo // fetched charges, by id
	wholes  map[string]wholeInfo  // payments read for a full refund's amount, by id
	// bothWays: the plan or journals name some payments by charge and
	// others by payment intent, so one payment may go by both (links.go).
	bothWays bool
	// halt is what made the provider unusable (stripe.go): no call begins
	// after it.
	halt atomic.Pointer[StripeError]
	// overflow is the first sum beyond int64 (sums.go): the audit stops.
	overflow atomic.Pointer[money.TotalError]
}

// itemView is an item's state with its strings, which point into the arena.
type itemView struct {
	idx    uint32
	batch  string
	item   string
	target string
	pay    refund.Payment
	flags  uint16
	status string
}

func (r *run) view(i uint32) itemView {
	s := r.st
	sl := s.slot(i)
	batch, item := s.idx.Key(i)
	v := itemView{idx: i, batch: batch, item: item, target: s.str(sl.target), flags: sl.flags}
	v.pay = paymentOf(v.target, sl.flags)
	switch {
	case sl.flags&flagRefunded != 0:
		v.status = "refunded"
	case sl.status == statusFailed:
		v.status = "failed"
	case sl.status == statusInDoubt:
		v.status = "in_doubt"
	}
	return v
}

// finding starts a finding about item v.
func (v *itemView) finding(kind string) *Finding {
	f := &Finding{Finding: kind, Batch: v.batch, Item: v.item, Status: v.status}
	f.on(v.pay)
	return f
}

// journalRefunds are the refunds the journal holds for item i and has not
// journaled as canceled, first journaled first.
func (r *run) journalRefunds(i uint32) []Refund {
	s := r.st
	sl := s.slot(i)
	if sl.flags&flagRefunded == 0 {
		return nil
	}
	var out []Refund
	if id := s.str(sl.refund); !s.canceled[id] {
		out = append(out, Refund{ID: id, Amount: sl.amount, Currency: s.currencies.Name(sl.currency)})
	}
	if sl.flags&flagExtras != 0 {
		for _, x := range s.extras[i] {
			if !s.canceled[x.id] {
				out = append(out, Refund{ID: x.id, Amount: x.amount, Currency: x.currency})
			}
		}
	}
	return out
}

// liveRefundCount is len(journalRefunds(i)) without building the list.
func (r *run) liveRefundCount(i uint32, sl *itemSlot) int {
	if sl.flags&flagRefunded == 0 {
		return 0
	}
	if sl.flags&flagExtras == 0 && len(r.st.canceled) == 0 {
		return 1
	}
	return len(r.journalRefunds(i))
}
