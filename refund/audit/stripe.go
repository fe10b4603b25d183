package audit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// target is a charge or payment intent whose refunds are listed once for
// every group (batch) of items on it.
type target struct {
	id     string
	intent bool
	heads  []uint32 // first item of each group on it
}

// listJob is the listing of one target.
type listJob struct {
	t       *target
	refunds []*stripe.Refund
	err     error
	done    chan struct{}
}

// listRefused is a list Stripe refused for a reason other than the key:
// the target's items cannot be checked.
type listRefused struct{ code, msg string }

func (e *listRefused) Error() string { return e.code + ": " + e.msg }

// stripePass lists the refunds of every target, in parallel and paced by
// the limiter, and checks each target's groups in order as its list comes.
func (r *run) stripePass(ctx context.Context) error {
	s := r.st
	var targets []*target
	index := map[string]int{}
	for i := range s.n {
		sl := s.slot(i)
		if sl.target == 0 {
			r.journalItem(i, sl, "") // nothing to look up at Stripe
			continue
		}
		if sl.flags&flagGroupHead == 0 {
			continue
		}
		id := s.str(sl.target)
		k, ok := index[id]
		if !ok {
			k = len(targets)
			index[id] = k
			targets = append(targets, &target{id: id, intent: sl.flags&flagIntent != 0})
		}
		targets[k].heads = append(targets[k].heads, i)
	}
	index = nil

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	window := 16 * r.opts.Workers
	ordered := make(chan *listJob, window)
	work := make(chan *listJob, window)
	var wg sync.WaitGroup
	for range r.opts.Workers {
		wg.Go(func() {
			for j := range work {
				j.refunds, j.err = r.list(ctx, j.t)
				close(j.done)
			}
		})
	}
	go func() {
		defer close(work)
		defer close(ordered)
		for _, t := range targets {
			j := &listJob{t: t, done: make(chan struct{})}
			select {
			case ordered <- j:
			case <-ctx.Done():
				return
			}
			work <- j
		}
	}()
	defer wg.Wait()

	var stop error
	for j := range ordered {
		<-j.done
		if stop != nil {
			continue
		}
		var refused *listRefused
		switch {
		case errors.As(j.err, &refused):
			r.unchecked(j.t, refused)
		case j.err != nil:
			stop = j.err
			cancel()
		default:
			if err := r.stripeTarget(ctx, j.t, j.refunds); err != nil {
				stop = err
				cancel()
			}
		}
	}
	return stop
}

// unchecked reports a target Stripe would not list, and checks its items by
// the journal alone.
func (r *run) unchecked(t *target, e *listRefused) {
	f := &Finding{Finding: KindUnchecked, Code: e.code, Message: e.msg,
		Remedy: "Stripe would not list this charge's refunds, so its items were checked against the journal only: look at the charge in the dashboard"}
	if t.intent {
		f.PaymentIntent = t.id
	} else {
		f.Charge = t.id
	}
	r.out(f)
	for _, h := range t.heads {
		for _, m := range r.st.members(h) {
			r.journalItem(m, r.st.slot(m), "")
		}
	}
}

// errClass is what a failed call means for the audit.
type errClass int

const (
	classRetry   errClass = iota // no answer, or Stripe asks to wait: same call again
	classFatal                   // the key is refused: nothing can be checked
	classMissing                 // no such object
	classRefused                 // any other refusal
)

func classify(err error) (errClass, string, string) {
	var se *stripe.Error
	if !errors.As(err, &se) {
		return classRetry, "network_error", "no answer from Stripe"
	}
	code := string(se.Code)
	if code == "" {
		code = string(se.Type)
	}
	switch st := se.HTTPStatusCode; {
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		return classFatal, code, ""
	case st == 0 || st == http.StatusTooManyRequests || st == http.StatusConflict || st >= 500:
		return classRetry, code, se.Msg
	case st == http.StatusNotFound:
		return classMissing, code, se.Msg
	}
	return classRefused, code, se.Msg
}

// call makes one API call with pacing and retries. The key never appears
// in its errors: on a refused key only the status is named.
func (r *run) call(ctx context.Context, what string, fn func() error) error {
	for try := 1; ; try++ {
		if r.opts.Limiter != nil {
			if err := r.opts.Limiter.Wait(ctx); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return err
			}
		}
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		class, code, _ := classify(err)
		switch class {
		case classFatal:
			return &StripeError{fmt.Errorf("stripe refused the API key (%s)", code)}
		case classRetry:
			if try >= r.opts.MaxTries {
				return &StripeError{fmt.Errorf("stripe did not answer %s after %d tries (%s)", what, try, code)}
			}
			t := time.NewTimer(backoff(r.opts.Retry, try))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			continue
		}
		return err
	}
}

// backoff is a random delay in [d/2, d], d doubling from Base up to Max.
func backoff(b refund.Backoff, try int) time.Duration {
	d := b.Max
	if try < 30 && b.Base<<(try-1) < b.Max {
		d = b.Base << (try - 1)
	}
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// list returns every refund of a target; a charge Stripe does not know has
// none.
func (r *run) list(ctx context.Context, t *target) ([]*stripe.Refund, error) {
	it := &refund.Item{Charge: t.id}
	if t.intent {
		it = &refund.Item{PaymentIntent: t.id}
	}
	var out []*stripe.Refund
	err := r.call(ctx, "listing the refunds of "+t.id, func() error {
		r.rep.listCalls.Add(1)
		var err error
		out, err = r.opts.Stripe.List(ctx, it)
		return err
	})
	if err == nil {
		return out, nil
	}
	switch class, code, msg := classify(err); {
	case errors.As(err, new(*StripeError)) || ctx.Err() != nil:
		return nil, err
	case class == classMissing:
		return nil, nil
	case class == classRefused:
		return nil, &listRefused{code: code, msg: msg}
	}
	return nil, err
}

// sref is a refund as Stripe listed it, with its refundkit metadata.
type sref struct {
	Refund
	live    bool
	batch   string
	item    string
	attempt int
}

func newSref(x *stripe.Refund) *sref {
	s := &sref{
		Refund: Refund{ID: x.ID, Amount: x.Amount, Currency: string(x.Currency), Status: string(x.Status), Created: x.Created},
		live:   x.Status != stripe.RefundStatusCanceled && x.Status != stripe.RefundStatusFailed,
		batch:  x.Metadata[refund.MetaBatch],
		item:   x.Metadata[refund.MetaItem],
	}
	if n, err := strconv.Atoi(x.Metadata[refund.MetaAttempt]); err == nil && n >= 1 {
		s.attempt = n
	}
	return s
}

// reversible reports a refund Stripe can still cancel.
func (x *sref) reversible() bool { return x.Status == string(stripe.RefundStatusRequiresAction) }

// stripeTarget checks every group on a target against its refunds.
func (r *run) stripeTarget(ctx context.Context, t *target, list []*stripe.Refund) error {
	all := make([]*sref, len(list))
	for k, x := range list {
		all[len(list)-1-k] = newSref(x) // Stripe lists newest first
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].Created < all[b].Created })
	byID := make(map[string]*sref, len(all))
	for _, x := range all {
		byID[x.ID] = x
	}
	for _, h := range t.heads {
		if err := r.stripeGroup(ctx, t, h, all, byID, len(t.heads) > 1); err != nil {
			return err
		}
	}
	return nil
}

// member is one item of a group as Stripe sees it.
type member struct {
	v       itemView
	sl      *itemSlot
	planned bool
	refunds []*sref // live refunds Stripe has for it, oldest first
}

// stripeGroup checks the items of one batch on one target: refunds per
// item and per charge, refunds only Stripe or only the journal has, items
// in doubt or missing. It backfills and cancels as the options ask.
func (r *run) stripeGroup(ctx context.Context, t *target, head uint32, all []*sref, byID map[string]*sref, shared bool) error {
	s := r.st
	ids := []uint32{head}
	if s.slot(head).next != 0 {
		ids = s.members(head)
	}
	ms := make([]*member, len(ids))
	byItem := make(map[string]*member, len(ids))
	var planned []*member
	for k, i := range ids {
		sl := s.slot(i)
		m := &member{v: r.view(i), sl: sl, planned: !s.planned || sl.flags&flagInPlan != 0}
		ms[k] = m
		byItem[m.v.item] = m
		if m.planned {
			planned = append(planned, m)
		}
	}
	batch := ms[0].v.batch

	// Attribute live refunds: by metadata, then (AllRefunds) those without
	// refundkit metadata to the one planned item when that is unambiguous.
	var others, noMeta []*sref // of this batch for items not in the group; without metadata
	for _, x := range all {
		switch {
		case !x.live:
		case x.batch == batch:
			if m := byItem[x.item]; m != nil {
				m.refunds = append(m.refunds, x)
			} else {
				others = append(others, x)
			}
		case x.batch == "" && r.opts.AllRefunds:
			noMeta = append(noMeta, x)
		}
	}
	var unattributed []*sref
	for _, x := range noMeta {
		if len(planned) == 1 && !shared && (planned[0].sl.reqAmount == 0 || planned[0].sl.reqAmount == x.Amount) {
			p := planned[0]
			p.refunds = append(p.refunds, x)
			sort.SliceStable(p.refunds, func(a, b int) bool { return p.refunds[a].Created < p.refunds[b].Created })
			continue
		}
		unattributed = append(unattributed, x)
	}

	// Refunds no planned item accounts for, named in a missing item's remedy.
	var spare []string
	for _, x := range others {
		spare = append(spare, x.ID+" (item "+x.item+")")
	}
	for _, x := range unattributed {
		spare = append(spare, x.ID+" (no metadata)")
	}
	for _, m := range ms {
		if !m.planned {
			for _, x := range m.refunds {
				spare = append(spare, x.ID+" (item "+m.v.item+")")
			}
		}
	}
	for _, m := range ms {
		if err := r.stripeItem(ctx, m, byID, unplannedNote(spare)); err != nil {
			return err
		}
	}
	if err := r.stripeOthers(ctx, t, batch, others); err != nil {
		return err
	}
	for _, x := range unattributed {
		r.out(r.unattributedFinding(t, batch, x, len(planned), shared))
	}
	return r.stripeCharge(ctx, t, batch, ms, planned, others, unattributed)
}

// stripeItem checks one item against its refunds at Stripe; note is added
// to the remedy of a missing item.
func (r *run) stripeItem(ctx context.Context, m *member, byID map[string]*sref, note string) error {
	journaled := r.journalRefunds(m.v.idx)
	inJournal := make(map[string]bool, len(journaled))
	for _, j := range journaled {
		inJournal[j.ID] = true
	}

	if len(m.refunds) > 1 {
		f := m.v.finding(KindDuplicate)
		if err := r.settleExtras(ctx, f, m.v.batch, m.v.item, m.refunds, 1, m.v); err != nil {
			return err
		}
		r.out(f)
	}

	var live []*sref // after any cancel
	for _, x := range m.refunds {
		if x.Action != ActionCanceled {
			live = append(live, x)
		}
	}
	var unjournaled []*sref
	for _, x := range live {
		if !inJournal[x.ID] {
			unjournaled = append(unjournaled, x)
		}
	}
	if len(unjournaled) > 0 {
		f := m.v.finding(KindStripeOnly)
		if err := r.backfill(f, m.v.batch, m.v.item, m.v, unjournaled); err != nil {
			return err
		}
		r.out(f)
	}

	var gone []Refund
	for _, j := range journaled {
		x := byID[j.ID]
		switch {
		case x == nil:
			j.Note = "Stripe has no such refund on this charge"
		case !x.live:
			j.Status, j.Note = x.Status, "Stripe has it as "+x.Status
		default:
			continue
		}
		gone = append(gone, j)
	}
	if len(gone) > 0 {
		f := m.v.finding(KindJournalOnly)
		f.Refunds = gone
		for _, j := range gone {
			f.Amount += j.Amount
			f.Currency = j.Currency
		}
		f.Remedy = "the journal records these refunds but Stripe does not have them as live refunds: the customer was not refunded by them"
		if len(live) == 0 {
			f.Remedy += ", yet refund skips the item as refunded: check the charge in the dashboard and refund the item under a new item id if it is still owed"
		}
		r.out(f)
	}

	if len(live) > 0 || len(journaled) > 0 {
		return nil
	}
	switch {
	case m.sl.flags&flagRefunded == 0 && m.sl.status == statusInDoubt:
		f := m.v.finding(KindInDoubt)
		f.Amount, f.Currency = m.sl.reqAmount, r.st.currencies.name(uint32(m.sl.reqCurrency))
		f.Remedy = "Stripe has no refund for this item: run refund again with this journal to finish it (it looks the item up at Stripe before any new call)"
		r.out(f)
	case r.st.planned && m.sl.flags&flagInPlan != 0 && m.sl.flags&flagInJournal == 0:
		f := m.v.finding(KindMissing)
		f.Amount, f.Currency = m.sl.reqAmount, r.st.currencies.name(uint32(m.sl.reqCurrency))
		f.Remedy = "nothing was journaled for this planned item and Stripe has no refund for it: refund --journal with this journal and plan refunds it" + note
		r.out(f)
	}
	return nil
}

// stripeOthers reports refunds of the batch on the target for items that
// are not in its group. An item nobody has heard of is backfilled; an item
// that the journal or plan puts on another charge is left to that group.
func (r *run) stripeOthers(ctx context.Context, t *target, batch string, others []*sref) error {
	byItem := map[string][]*sref{}
	var order []string
	for _, x := range others {
		if _, known := r.st.find(batch, x.item); known {
			continue
		}
		if byItem[x.item] == nil {
			order = append(order, x.item)
		}
		byItem[x.item] = append(byItem[x.item], x)
	}
	for _, item := range order {
		v := itemView{batch: batch, item: item, target: t.id, isIntent: t.intent}
		f := v.finding(KindStripeOnly)
		if err := r.backfill(f, batch, item, v, byItem[item]); err != nil {
			return err
		}
		if r.st.planned {
			f.Remedy += "; the plan does not list this item"
		}
		r.out(f)
	}
	return nil
}

func (r *run) unattributedFinding(t *target, batch string, x *sref, planned int, shared bool) *Finding {
	v := itemView{batch: batch, target: t.id, isIntent: t.intent}
	f := v.finding(KindStripeOnly)
	ref := x.Refund
	ref.Action = ActionUnattributed
	f.Refunds = []Refund{ref}
	f.Amount, f.Currency = x.Amount, x.Currency
	var why string
	switch {
	case shared:
		why = "items of more than one batch are on this charge"
	case planned == 1:
		why = "its amount differs from the planned item's"
	default:
		why = fmt.Sprintf("%d items are planned on this charge", planned)
	}
	f.Remedy = fmt.Sprintf("this refund carries no refundkit metadata and %s, so which item it refunded is not known and it was not backfilled: match it by hand before running refund for this charge again", why)
	return f
}

// stripeCharge reports a charge with more live refunds of the batch than
// items planned on it, beyond what the items' own duplicates explain:
// refunds of items not planned, and refunds matched to no item.
func (r *run) stripeCharge(ctx context.Context, t *target, batch string, ms, planned []*member, others, unattributed []*sref) error {
	if len(planned) == 0 {
		return nil
	}
	spare := append(append([]*sref(nil), others...), unattributed...)
	empty := 0
	var refunds []Refund // the planned items' own
	for _, m := range ms {
		var live []*sref
		for _, x := range m.refunds {
			if x.Action != ActionCanceled {
				live = append(live, x)
			}
		}
		switch {
		case !m.planned:
			spare = append(spare, live...)
		case len(live) == 0:
			empty++
		}
		if m.planned {
			for _, x := range live {
				ref := x.Refund
				ref.Item, ref.Action, ref.Note = m.v.item, "", ""
				refunds = append(refunds, ref)
			}
		}
	}
	if len(spare) <= empty {
		return nil
	}
	sort.SliceStable(spare, func(a, b int) bool { return spare[a].Created < spare[b].Created })
	v := itemView{batch: batch, target: t.id, isIntent: t.intent}
	f := v.finding(KindDuplicate)
	f.Planned = len(planned)
	f.Message = fmt.Sprintf("%d live refunds of the batch on a charge with %d planned items", len(refunds)+len(spare), len(planned))
	if err := r.settleExtras(ctx, f, batch, "", spare, empty, v); err != nil {
		return err
	}
	// The planned items' own refunds too, so the charge's whole story is here.
	f.Refunds = append(refunds, f.Refunds...)
	sort.SliceStable(f.Refunds, func(a, b int) bool { return f.Refunds[a].Created < f.Refunds[b].Created })
	r.out(f)
	return nil
}

// settleExtras fills f with refunds xs (oldest first), of which keep are
// the item's (or charge's) own: it keeps those Stripe can no longer cancel
// first, so that what remains extra is as reversible as it can be. The
// extras are canceled when asked and possible, and f gets the remedy.
func (r *run) settleExtras(ctx context.Context, f *Finding, batch, item string, xs []*sref, keep int, v itemView) error {
	order := make([]*sref, 0, len(xs))
	for _, x := range xs {
		if !x.reversible() {
			order = append(order, x)
		}
	}
	for _, x := range xs {
		if x.reversible() {
			order = append(order, x)
		}
	}
	kept := map[*sref]bool{}
	for _, x := range order[:min(keep, len(order))] {
		kept[x] = true
	}
	for _, x := range xs {
		switch {
		case kept[x]:
			x.Action = ActionKeep
		case !x.reversible():
			x.Action = ActionIrreversible
			r.rep.Irreversible++
			r.rep.IrreversibleAmount[x.Currency] += x.Amount
		default:
			owner := item
			if owner == "" && x.batch == batch {
				owner = x.item
			}
			if err := r.cancelExtra(ctx, x, batch, owner, v); err != nil {
				return err
			}
		}
		if !kept[x] {
			f.Amount += x.Amount
			f.Currency = x.Currency
		}
		ref := x.Refund
		if item == "" && x.batch == batch {
			ref.Item = x.item
		}
		f.Refunds = append(f.Refunds, ref)
	}
	f.Remedy = duplicateRemedy(f, false)
	return nil
}

// cancelExtra cancels an extra refund that still requires action when
// CancelExtras is set, journaling the cancel; owner is the item it is for.
func (r *run) cancelExtra(ctx context.Context, x *sref, batch, owner string, v itemView) error {
	x.Action = ActionCancelable
	switch {
	case !r.opts.CancelExtras:
		r.rep.Cancelable++
		return nil
	case owner == "":
		x.Note = "it names no item to journal the cancel under: cancel it in the dashboard once matched"
		r.rep.Cancelable++
		return nil
	}
	var res *stripe.Refund
	err := r.call(ctx, "canceling "+x.ID, func() error {
		r.rep.cancelCalls.Add(1)
		var err error
		// Once sent, a cancel is not abandoned on a signal: its answer
		// must be journaled.
		res, err = r.opts.Stripe.Cancel(context.WithoutCancel(ctx), x.ID)
		return err
	})
	if err != nil {
		if errors.As(err, new(*StripeError)) || ctx.Err() != nil {
			return err
		}
		_, code, msg := classify(err)
		// Stripe cancels only refunds that still require action: a refusal
		// means the refund went on and cannot be reversed any more.
		x.Action, x.Note = ActionIrreversible, fmt.Sprintf("Stripe refused the cancel (%s: %s)", code, msg)
		r.rep.Irreversible++
		r.rep.IrreversibleAmount[x.Currency] += x.Amount
		return nil
	}
	if res.Status != stripe.RefundStatusCanceled {
		x.Status = string(res.Status)
		x.Action, x.Note = ActionIrreversible, "Stripe answered the cancel with status "+string(res.Status)
		r.rep.Irreversible++
		r.rep.IrreversibleAmount[x.Currency] += x.Amount
		return nil
	}
	x.Status, x.Action = string(res.Status), ActionCanceled
	r.rep.Canceled++
	r.rep.CanceledAmount[x.Currency] += x.Amount
	rec := r.record(journal.TypeCanceled, batch, owner, v, x)
	if err := r.opts.Actions.Append(rec); err != nil {
		return &JournalError{err}
	}
	return nil
}

// backfill fills a stripe_only finding with refunds xs and journals them
// when Backfill is set: the one the item keeps first, so a journal that
// had nothing for the item now names it as the item's refund.
func (r *run) backfill(f *Finding, batch, item string, v itemView, xs []*sref) error {
	order := make([]*sref, 0, len(xs))
	for _, x := range xs {
		if x.Action == ActionKeep {
			order = append(order, x)
		}
	}
	for _, x := range xs {
		if x.Action != ActionKeep {
			order = append(order, x)
		}
	}
	var recs []*journal.Record
	for _, x := range order {
		ref := x.Refund
		ref.Note = ""
		if r.opts.Backfill != nil {
			ref.Action = ActionBackfilled
			recs = append(recs, r.record(journal.TypeRefunded, batch, item, v, x))
		} else {
			ref.Action = ""
		}
		f.Refunds = append(f.Refunds, ref)
		f.Amount += x.Amount
		f.Currency = x.Currency
	}
	if r.opts.Backfill == nil {
		f.Remedy = "the journal does not know this refund, so a refund run would refund the item again: run audit --stripe with --backfill JOURNAL to journal it"
		return nil
	}
	if err := r.opts.Backfill.Append(recs...); err != nil {
		return &JournalError{err}
	}
	r.rep.Backfilled += len(recs)
	f.Remedy = "journaled into " + r.opts.Backfill.Path() + " (source backfill): refund skips this item from now on"
	return nil
}

// record is the journal record of a refund found or canceled by audit.
func (r *run) record(typ journal.Type, batch, item string, v itemView, x *sref) *journal.Record {
	rec := &journal.Record{
		V: journal.Version, Type: typ, Time: r.opts.Now().UTC(), Batch: batch, Item: item,
		Attempt: x.attempt, Amount: x.Amount, Currency: x.Currency, Refund: x.ID, Status: x.Status,
	}
	if v.isIntent {
		rec.PaymentIntent = v.target
	} else {
		rec.Charge = v.target
	}
	if x.attempt > 0 {
		rec.Key = refund.IdempotencyKey(batch, item, x.attempt)
	}
	if typ == journal.TypeRefunded {
		rec.Source = journal.SourceBackfill
	}
	return rec
}
