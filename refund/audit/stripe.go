package audit

// Asking the provider: the refunds of every payment, listed in parallel,
// paced and retried, and checked in order.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/refundkit/refundkit/refund"
)

// target is a payment whose refunds are listed once for every group
// (batch) of items on it, under one name or (links) all of its names.
type target struct {
	id    string
	pay   refund.Payment
	heads []uint32 // first item of each group on it (on each of its names)
}

// listJob is the listing of one target, the k-th.
type listJob struct {
	t       *target
	k       int
	refunds []refund.Refund
	err     error
	done    chan struct{}
}

// listRefused is a list the provider refused, not for the key: the
// target's items cannot be checked.
type listRefused struct{ code, msg string }

func (e *listRefused) Error() string { return e.code + ": " + e.msg }

// stripePass lists the refunds of every target, in parallel and paced,
// and checks each target's groups in order as its list comes.
func (r *run) stripePass(ctx context.Context) error {
	s := r.st
	var targets []*target
	index := map[string]int{}
	intents, charges := false, false
	for i := range s.n {
		sl := s.slot(i)
		if sl.target == 0 {
			r.journalItem(i, sl, "") // nothing to look up
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
			targets = append(targets, &target{id: id, pay: paymentOf(id, sl.flags)})
			if sl.flags&flagIntent != 0 {
				intents = true
			} else if sl.flags&(flagCapture|flagPSPReference) == 0 {
				charges = true
			}
		}
		targets[k].heads = append(targets[k].heads, i)
	}
	var l *links
	if intents && charges {
		// A payment may be named by its charge and by its intent.
		l = newLinks(targets, index)
		r.bothWays = true
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
		for k, t := range targets {
			j := &listJob{t: t, k: k, done: make(chan struct{})}
			if !l.dispatch(j) {
				continue // listed by the checker, with another name of its payment
			}
			// To the workers first: a job the checker may wait for (links)
			// is listed whether or not it is reading.
			select {
			case work <- j:
			case <-ctx.Done():
				return
			}
			select {
			case ordered <- j:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer wg.Wait()

	var stop error
	checked := 0
	for j := range ordered {
		<-j.done
		l.forget(j)
		if stop != nil {
			continue
		}
		checked++
		t, list, err := j.t, j.refunds, j.err
		if l != nil {
			if l.joined[j.k] {
				continue // checked with another name of its payment
			}
			var taken int
			t, list, taken, err = r.join(ctx, l, j)
			checked += taken
		}
		var refused *listRefused
		switch {
		case errors.As(err, &refused):
			r.unchecked(t, refused)
		case err != nil:
			stop = err
			cancel()
		default:
			if err := r.stripeTarget(ctx, t, list); err != nil {
				stop = err
				cancel()
			}
		}
	}
	if stop == nil && checked < len(targets) {
		// Stopped between lists: the targets never listed were not checked.
		stop = ctx.Err()
	}
	return stop
}

// unchecked reports a target the provider would not list, and checks its
// items by the journals alone, as itemPass left them.
func (r *run) unchecked(t *target, e *listRefused) {
	f := &Finding{Finding: KindUnchecked, Code: e.code, Message: e.msg,
		Remedy: "the provider would not list this payment's refunds, or could not say whose they are, so its items were checked against the journal only: look at the payment in the provider's dashboard"}
	f.on(t.pay)
	r.out(f)
	for _, h := range t.heads {
		for _, m := range r.st.members(h) {
			sl := r.st.slot(m)
			switch {
			case sl.flags&flagRefunded == 0 && sl.status == statusFailed:
				r.out(r.failedFinding(m, sl))
			case sl.flags&flagRefunded != 0 && sl.flags&flagFinalFailure != 0 && !r.recordConflict(m, sl):
				r.out(r.conflictFinding(m, sl, true, ""))
			}
			if sl.flags&flagRefunded != 0 && r.creditDiffers(m, sl) {
				r.creditFindings(m, sl)
			}
			r.journalItem(m, sl, "")
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

// classify sorts a provider's error for the audit: a read or a cancel
// under its own key is safe to repeat, an indeterminate one too.
func classify(err error) (errClass, string, string) {
	switch f := refund.Classify(err); {
	case f.Class == refund.ClassFatal:
		return classFatal, f.Code, ""
	case f.Class == refund.ClassRetry || f.Class == refund.ClassIndeterminate || f.Class == refund.ClassStopped:
		return classRetry, f.Code, f.Message
	case f.Status == http.StatusNotFound:
		return classMissing, f.Code, f.Message
	default:
		return classRefused, f.Code, f.Message
	}
}

// call makes one API call to ep with pacing and retries. The key never
// appears in its errors.
func (r *run) call(ctx context.Context, ep refund.Endpoint, what string, fn func() error) error {
	name := cmp.Or(strings.ToLower(r.rep.Provider), "the provider")
	for try := 1; ; try++ {
		if err := r.opts.Pacer.Wait(ctx, ep); err != nil {
			return cmp.Or(ctx.Err(), err)
		}
		if h := r.halt.Load(); h != nil {
			return h // another call found the provider unusable
		}
		err := fn()
		r.opts.Pacer.Done(ep, err)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		class, code, _ := classify(err)
		switch class {
		case classFatal:
			return r.halted(&StripeError{fmt.Errorf("%s refused the API key (%s)", name, code)})
		case classRetry:
			if try >= r.opts.MaxTries {
				return r.halted(&StripeError{fmt.Errorf("%s did not answer %s after %d tries (%s)", name, what, try, code)})
			}
			if !r.opts.Retry.Sleep(ctx, try-1) {
				return ctx.Err()
			}
			continue
		}
		return err
	}
}

// halted records e as what stops the audit, unless a call found another
// reason first, and returns the one recorded.
func (r *run) halted(e *StripeError) *StripeError {
	r.halt.CompareAndSwap(nil, e)
	return r.halt.Load()
}

// list returns every refund of a target; a payment the provider does not
// know has none.
func (r *run) list(ctx context.Context, t *target) ([]refund.Refund, error) {
	p := t.pay
	var out []refund.Refund
	err := r.call(ctx, refund.EndpointList, "listing the refunds of "+t.id, func() error {
		r.rep.listCalls.Add(1)
		var err error
		out, err = r.opts.Provider.Find(ctx, p)
		return err
	})
	if err == nil {
		for _, x := range out {
			if x.Unattributed {
				// Refunds whose maker it cannot show: the items are
				// checked by the journals alone.
				msg := "the provider cannot say whose some of its refunds are"
				if x.FailureReason != "" {
					msg += ": " + x.FailureReason
				}
				return nil, &listRefused{code: refund.CodeRefundedUnattributed, msg: msg}
			}
		}
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
