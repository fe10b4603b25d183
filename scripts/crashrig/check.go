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
	// Charge or PaymentIntent is what the plan names; "" is not checked.
	Charge, PaymentIntent string
	// Amount is what the refund must be; 0 is not checked.
	Amount int64
}

// CheckOnce is the end of a crash run: at the simulator every wanted item
// of batch has exactly one live refund, of its charge and amount, and no
// live refund of batch names an item outside want; the journals (one, or
// one a shard) load with no torn tail, and one says each item is refunded
// by that very refund. It reports each problem to rep and returns how many
// items have no refund at all.
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
	live := s.LiveRefunds(batch)
	planned := make(map[string]bool, len(want))
	for _, w := range want {
		planned[w.Item] = true
		rs := live[w.Item]
		switch {
		case len(rs) == 0:
			missing++
			rep.Errorf("item %s: no refund at Stripe", w.Item)
			continue
		case len(rs) > 1:
			rep.Errorf("item %s: %d refunds at Stripe, want exactly 1", w.Item, len(rs))
		}
		rf := rs[0]
		if (w.Amount != 0 && rf.Amount != w.Amount) || (w.Charge != "" && rf.Charge != w.Charge) || (w.PaymentIntent != "" && rf.PaymentIntent != w.PaymentIntent) {
			rep.Errorf("item %s: refund %s is %d on %s/%s, want %d on %s%s", w.Item, rf.ID, rf.Amount, rf.Charge, rf.PaymentIntent, w.Amount, w.Charge, w.PaymentIntent)
		}
		if !slices.ContainsFunc(states, func(st *journal.State) bool {
			is, ok := st.Lookup(batch, w.Item)
			return ok && is.Status == journal.StatusRefunded && is.Refund == rf.ID
		}) {
			rep.Errorf("item %s: no journal says it is refunded by %s", w.Item, rf.ID)
		}
	}
	for item, rs := range live {
		if !planned[item] {
			rep.Errorf("refund %s names item %s, which is not in the plan", rs[0].ID, item)
		}
	}
	return missing
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
