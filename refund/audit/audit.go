// Package audit tells whether a batch was refunded exactly once: it reads
// journals (and a plan) into compact per-item state and reports findings,
// and with a provider it compares every payment's refunds with the
// journals, backfills those they lack and cancels extras it still can.
package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/money"
)

// Auditor gathers a plan and journals, then reports findings with Run.
type Auditor struct {
	st       *state
	torn     []*journal.Torn
	journals int
	records  int
	held     []string // journals a running refund holds, as named
}

// New returns an Auditor with nothing read yet.
func New() *Auditor { return &Auditor{st: newState()} }

// AddPlan reads plan items (refund.Item JSON lines) from r, named name in
// errors. A line that is not a valid item, or an item listed twice, is a
// *refund.InputError.
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

// AddJournal folds every record of a journal from r, named name in
// messages. A torn final line is returned and becomes a torn_tail finding;
// a corrupt line or an unknown version is an error, and the audit cannot
// go on.
func (a *Auditor) AddJournal(r io.Reader, name string) (*journal.Torn, error) {
	a.journals++
	if f, ok := r.(*os.File); ok {
		if info, err := f.Stat(); err == nil && info.Mode().IsRegular() {
			a.st.idx.Reserve(journal.ItemsIn(info.Size()))
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

// AddHeldJournal is AddJournal for a journal a running refund holds: its
// items in doubt may be in flight, and their findings say so.
func (a *Auditor) AddHeldJournal(r io.Reader, name string) (*journal.Torn, error) {
	a.held = append(a.held, name)
	a.st.live = true
	defer func() { a.st.live = false }()
	return a.AddJournal(r, name)
}

// Empty reports an Auditor with nothing to audit, whose audit would prove
// nothing.
func (a *Auditor) Empty() bool { return a.st.n == 0 && a.records == 0 && len(a.torn) == 0 }

// AddTorn reports a torn tail journal.Open cut off before the journal was
// read.
func (a *Auditor) AddTorn(t *journal.Torn) { a.torn = append(a.torn, t) }

// Options say how far Run goes beyond the journals.
type Options struct {
	// Provider, when set, is asked for the refunds of every payment.
	Provider refund.Provider
	// AllRefunds counts refunds without refundkit metadata as the batch's:
	// one is an item's only when it is exactly what the item asked for and
	// nothing else matches; any other is reported unattributed.
	AllRefunds bool
	// Charges reads a charge's amount, which tells whether a refund without
	// metadata is a full refund (default: the Provider).
	Charges  ChargeGetter
	Pacer    *refund.Pacer   // paces every API call; nil: unlimited
	Workers  int             // lists in flight at once (default 4)
	Backfill *journal.Writer // receives a refunded record for every refund the journal lacks
	// CancelExtras cancels the extras the provider can still cancel,
	// keeping one refund per item, and journals each cancel in Actions.
	CancelExtras bool
	Actions      *journal.Writer
	// Retry spaces retries of a call not answered (default: the provider's
	// Facts.Backoff); after MaxTries tries it counts as unreachable.
	Retry        refund.Backoff
	MaxTries     int
	Now          func() time.Time // for records and the age of pending refunds
	PendingAfter time.Duration    // a pending refund older is a finding (default DefaultPendingAfter)
	// Told are refunds the provider told of on its own (Adyen's
	// notifications): a live one of an audited batch for an item nobody
	// knows is a finding.
	Told []refund.Refund
}

// DefaultPendingAfter is how long a refund may stay pending unreported:
// PayPal's eCheck refunds take up to about a week to clear.
const DefaultPendingAfter = 7 * 24 * time.Hour

// StripeError is an audit stopped because the provider refused the key or
// could not be reached: nothing can be concluded.
type StripeError struct{ Err error }

func (e *StripeError) Error() string { return e.Err.Error() }
func (e *StripeError) Unwrap() error { return e.Err }

// JournalError is a backfill or cancel record that could not be written:
// the audit stopped there.
type JournalError struct{ Err error }

func (e *JournalError) Error() string { return fmt.Sprintf("journal write failed: %v", e.Err) }
func (e *JournalError) Unwrap() error { return e.Err }

// Run reports every finding to emit, in a stable order, and returns the
// counts. The error is a *StripeError, a *JournalError or ctx's, and the
// report covers what was checked before it; a sum beyond int64
// (*money.TotalError) or a plan of other batches (*BatchMismatchError)
// gives no report.
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
	r = &run{Auditor: a, opts: opts, rep: rep, charges: map[string]payInfo{}, wholes: map[string]payInfo{}, out: func(f *Finding) {
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
		// Without either, each item's own checks find every duplicate, and
		// grouping a million items is spared.
		a.st.groupItems()
	}
	// The state is only read from here on: shared refunds are found beside
	// the other passes.
	shared := r.startShared()
	var err error
	if opts.Provider == nil {
		r.journalPass()
		r.otherBatchPass()
	} else if err = r.stripePass(ctx); err == nil {
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
	charges map[string]payInfo // fetched charges, by id
	wholes  map[string]payInfo // payments read for a full refund's amount, by id
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
func (v itemView) finding(kind string) *Finding {
	f := &Finding{Finding: kind, Batch: v.batch, Item: v.item, Status: v.status}
	f.on(v.pay)
	return f
}

// journalRefunds are the refunds the journals hold for item i, not
// canceled, first journaled first.
func (r *run) journalRefunds(i uint32) []Refund {
	return slices.DeleteFunc(r.credited(i), func(x Refund) bool { return r.st.canceled[x.ID] })
}

// credited are the refunds the journals credit item i with, canceled too.
func (r *run) credited(i uint32) []Refund {
	s := r.st
	sl := s.slot(i)
	if sl.flags&flagRefunded == 0 {
		return nil
	}
	out := []Refund{{ID: s.str(sl.refund), Amount: sl.amount, Currency: s.currencies.Name(sl.currency)}}
	for _, x := range s.extras[i] {
		out = append(out, Refund{ID: x.id, Amount: x.amount, Currency: x.currency})
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
