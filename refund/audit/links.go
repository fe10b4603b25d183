package audit

// One payment, many names: a plan may name a payment by its charge on one
// line and by its payment intent on another. Checked alone, a name would
// take the other's refunds for extras; so the names are joined as the
// refunds say, and the payment is checked once, when its first name comes,
// with every item on any of its names, against its intent's list. links is
// nil for a plan that names payments one way only.

import (
	"context"
	"sync"

	"github.com/refundkit/refundkit/refund"
)

// links joins the names of one payment across targets.
type links struct {
	targets []*target
	index   map[string]int // target id -> its number

	mu    sync.Mutex
	taken []bool           // by target: listed with another name of its payment, or not at all: never dispatched
	jobs  map[int]*listJob // dispatched, not yet taken from the ordered queue

	joined []bool // checked, alone or with another name (the checker's only)
}

func newLinks(targets []*target, index map[string]int) *links {
	return &links{targets: targets, index: index, taken: make([]bool, len(targets)),
		jobs: map[int]*listJob{}, joined: make([]bool, len(targets))}
}

// dispatch records job j as handed to the workers, unless the checker took
// its target first.
func (l *links) dispatch(j *listJob) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.taken[j.k] {
		return false
	}
	l.jobs[j.k] = j
	return true
}

// forget drops job j, taken from the ordered queue.
func (l *links) forget(j *listJob) {
	if l == nil {
		return
	}
	l.mu.Lock()
	delete(l.jobs, j.k)
	l.mu.Unlock()
}

// take returns the job of target k if it was dispatched, else marks the
// target never to be dispatched and returns nil.
func (l *links) take(k int) *listJob {
	l.mu.Lock()
	defer l.mu.Unlock()
	if j := l.jobs[k]; j != nil {
		return j
	}
	l.taken[k] = true
	return nil
}

// name returns the target named id, an intent's or a charge's, if it was
// not checked yet.
func (l *links) name(id string, intent bool) (int, bool) {
	if id == "" {
		return 0, false
	}
	k, ok := l.index[id]
	if !ok || l.joined[k] {
		return 0, false
	}
	p := l.targets[k].pay
	if intent {
		return k, p.PaymentIntent != ""
	}
	return k, p.Charge != ""
}

// join gathers target j.t's payment under every name it has: a charge
// goes with the intent its refunds name, on the intent's list, and an
// intent with every charge its refunds name. It returns the payment to
// check, its refunds (or a list's error), and how many targets it took
// that were never dispatched.
func (r *run) join(ctx context.Context, l *links, j *listJob) (t *target, list []refund.Refund, taken int, err error) {
	l.joined[j.k] = true
	if j.err != nil {
		return j.t, nil, 0, j.err
	}
	list = j.refunds
	names := []int{j.k}
	intent := -1
	if j.t.pay.PaymentIntent != "" {
		intent = j.k
	} else {
		for _, x := range list {
			if k, ok := l.name(x.PaymentIntent, true); ok {
				intent = k
				break
			}
		}
		if intent < 0 {
			return j.t, list, 0, nil // a charge known by one name
		}
		l.joined[intent] = true
		names = append(names, intent)
		var took bool
		list, took, err = r.listOf(ctx, l, intent)
		if took {
			taken++
		}
		if err != nil {
			return l.payment(names, intent), nil, taken, err
		}
	}
	for _, x := range list {
		if k, ok := l.name(x.Charge, false); ok {
			l.joined[k] = true
			names = append(names, k)
			if l.take(k) == nil {
				taken++ // never listed: the intent's list holds its refunds
			}
		}
	}
	if len(names) == 1 {
		return j.t, list, taken, nil
	}
	return l.payment(names, intent), list, taken, nil
}

// listOf returns the refunds of target k: its job's, else listed now
// (took).
func (r *run) listOf(ctx context.Context, l *links, k int) (list []refund.Refund, took bool, err error) {
	if j := l.take(k); j != nil {
		select {
		case <-j.done:
			return j.refunds, false, j.err
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	list, err = r.list(ctx, l.targets[k])
	return list, true, err
}

// payment is the target of one payment named by targets names, among them
// its intent: every name's groups, named by the intent and its one charge.
func (l *links) payment(names []int, intent int) *target {
	id := l.targets[intent].id
	t := &target{id: id, pay: refund.Payment{PaymentIntent: id}}
	var charges []string
	for _, k := range names {
		n := l.targets[k]
		t.heads = append(t.heads, n.heads...)
		if n.pay.Charge != "" {
			charges = append(charges, n.pay.Charge)
		}
	}
	if len(charges) == 1 {
		t.pay.Charge = charges[0]
	}
	return t
}

// elsewhere reports a refund of the batch for an item the plan (or a
// journal) puts on another name of the refund's payment: checked with that
// name's items, never an extra of this one (names a refund made between
// their lists left unjoined).
func (r *run) elsewhere(batch string, x *sref) bool {
	if !r.bothWays {
		return false
	}
	s := r.st
	i, ok := s.idx.Find(batch, x.item)
	if !ok {
		return false
	}
	sl := s.slot(i)
	if sl.target == 0 || s.planned && sl.flags&flagInPlan == 0 {
		return false
	}
	t := s.str(sl.target)
	return t == x.charge || t == x.intent
}
