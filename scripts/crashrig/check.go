package crashrig

import (
	"slices"
	"strings"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// Want is a planned item that must end with exactly one live refund.
type Want struct {
	Item string
	// Charge, PaymentIntent, Capture or PSPReference is what the plan
	// names; "" is not checked.
	Charge, PaymentIntent, Capture, PSPReference string
	// Amount is what the refund must be; 0 is not checked.
	Amount int64
	// ForPerson: the item is meant to be left for a person (its call may
	// or may not have made a refund, and nothing may be sent again): at
	// most one live refund, and the journal says in doubt, or failed (held:
	// a refund stands on the payment that refund cannot tell its own).
	ForPerson bool
}

// CheckOnce is the end of a crash run: at the simulator every wanted item
// of batch has exactly one live refund, of its payment and amount, and no
// live refund of batch names an item outside want; the journals (one, or
// one a shard) load with no torn tail, and one says each item is refunded
// by that very refund. An item whose one refund ended failed at the
// provider (a PENDING refund that FAILED) must have no other refund and be
// journaled failed: it was never refunded twice. It reports each problem
// to rep and returns how many items have no refund at all.
func (s *Sim) CheckOnce(rep Reporter, batch string, want []Want, journals ...string) (missing int) {
	states := make([]*journal.State, 0, len(journals))
	for _, path := range journals {
		st, torn, err := journal.Load(path)
		if err != nil {
			rep.Errorf("load %s after the final run: %v", path, err)
			continue
		}
		if torn != nil {
			rep.Errorf("a torn tail is left after a clean final run: %v", torn)
		}
		states = append(states, st)
	}
	journaled := func(item string, ok func(journal.ItemState) bool) bool {
		return slices.ContainsFunc(states, func(st *journal.State) bool {
			is, found := st.Lookup(batch, item)
			return found && ok(is)
		})
	}
	all := s.BatchRefunds(batch)
	planned := make(map[string]bool, len(want))
	for _, w := range want {
		planned[w.Item] = true
		var live, failed []Refund
		for _, rf := range all[w.Item] {
			switch {
			case rf.Live:
				live = append(live, rf)
			case rf.Failed:
				failed = append(failed, rf)
			}
		}
		switch {
		case len(failed) > 0:
			if n := len(all[w.Item]); n > 1 {
				rep.Errorf("item %s: %d refunds (%s), one of which failed: want that one alone", w.Item, n, ids(all[w.Item]))
			}
			if !journaled(w.Item, func(is journal.ItemState) bool { return is.Status == journal.StatusFailed }) {
				rep.Errorf("item %s: refund %s failed at the provider, but no journal says the item failed", w.Item, failed[0].ID)
			}
			continue
		case w.ForPerson:
			if len(live) > 1 {
				rep.Errorf("item %s (left for a person): %d live refunds (%s), want at most 1", w.Item, len(live), ids(live))
			}
			if !journaled(w.Item, func(is journal.ItemState) bool {
				return is.Status == journal.StatusInDoubt || is.Status == journal.StatusFailed
			}) {
				rep.Errorf("item %s: meant to be left for a person, but no journal says it is in doubt or held", w.Item)
			}
			continue
		case len(live) == 0:
			missing++
			rep.Errorf("item %s: no refund at the simulator", w.Item)
			continue
		case len(live) > 1:
			rep.Errorf("item %s: %d live refunds at the simulator (%s), want exactly 1", w.Item, len(live), ids(live))
		}
		rf := live[0]
		if (w.Amount != 0 && rf.Amount != w.Amount) || (w.Charge != "" && rf.Payment != w.Charge) ||
			(w.PaymentIntent != "" && rf.PaymentIntent != w.PaymentIntent) || (w.Capture != "" && rf.Payment != w.Capture) ||
			(w.PSPReference != "" && rf.Payment != w.PSPReference) {
			rep.Errorf("item %s: refund %s is %d on %s/%s, want %d on %s%s%s%s", w.Item, rf.ID, rf.Amount, rf.Payment, rf.PaymentIntent, w.Amount, w.Charge, w.PaymentIntent, w.Capture, w.PSPReference)
		}
		if !journaled(w.Item, func(is journal.ItemState) bool { return is.Status == journal.StatusRefunded && is.Refund == rf.ID }) {
			rep.Errorf("item %s: no journal says it is refunded by %s", w.Item, rf.ID)
		}
	}
	for item, rs := range all {
		if !planned[item] && slices.ContainsFunc(rs, func(rf Refund) bool { return rf.Live }) {
			rep.Errorf("refund %s names item %s, which is not in the plan", rs[0].ID, item)
		}
	}
	return missing
}

// ids lists the refunds' ids, for messages.
func ids(rs []Refund) string {
	out := make([]string, len(rs))
	for i, rf := range rs {
		out[i] = rf.ID
	}
	return strings.Join(out, ", ")
}

// CheckIntents checks the write-ahead rule: every idempotency key of batch
// the simulator reserved is named by an intent in one of the journals, so
// no call was made that a crash could have left unrecorded.
func (s *Sim) CheckIntents(rep Reporter, batch string, journals ...string) {
	checkIntents(rep, s.Keys(), batch, journals...)
}

func checkIntents(rep Reporter, keys []string, batch string, journals ...string) {
	intents, err := Intents(journals...)
	if err != nil {
		rep.Errorf("write-ahead check: %v", err)
	}
	prefix := strings.TrimSuffix(refund.IdempotencyKey(batch, "", 0), ":0") // refundkit:<batch>:
	for _, key := range keys {
		if strings.HasPrefix(key, prefix) && !intents[key] {
			rep.Errorf("the simulator received key %s, which no journaled intent names", key)
		}
	}
}
