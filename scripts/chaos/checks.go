package main

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/stripesim"
)

// liveRefunds are the refunds of batch at the simulator that hold money
// (not canceled, not failed), by item.
func (r *rig) liveRefunds(batch string) map[string][]stripesim.Refund {
	live := map[string][]stripesim.Refund{}
	for _, rf := range r.sim.Refunds() {
		if rf.Metadata[refund.MetaBatch] != batch || rf.Status == stripesim.StatusCanceled || rf.Status == stripesim.StatusFailed {
			continue
		}
		item := rf.Metadata[refund.MetaItem]
		live[item] = append(live[item], rf)
	}
	return live
}

// checkOnce is the end of every scenario run: at the simulator, every
// planned item has exactly one live refund, of the right charge and amount,
// and no refund names an item outside the plan; no charge holds more live
// refunds than the plans meant to run on it intend; the journals (one, or
// one a shard) say each item is refunded by that very refund, and hold no
// torn tail; and every key the simulator saw has a journaled intent.
func (r *rig) checkOnce(p *plan, journals ...string) {
	r.t.Items += len(p.Items)
	r.mean(p)
	live := r.liveRefunds(p.Batch)
	states := make([]*journal.State, 0, len(journals))
	for _, path := range journals {
		st, torn, err := journal.Load(path)
		if err != nil {
			r.t.problemf("load %s after the final run: %v", path, err)
			continue
		}
		if torn != nil {
			r.t.problemf("a torn tail is left after a clean final run: %v", torn)
		}
		states = append(states, st)
	}
	for _, it := range p.Items {
		rs := live[it.Item.Item]
		switch {
		case len(rs) == 0:
			r.t.Missing++
			r.t.problemf("item %s: no refund at Stripe", it.Item.Item)
			continue
		case len(rs) > 1: // counted as duplicates by checkCharges
			r.t.problemf("item %s: %d refunds at Stripe", it.Item.Item, len(rs))
		}
		rf := rs[0]
		if rf.Amount != it.Want || (it.Charge != "" && rf.Charge != it.Charge) || (it.PaymentIntent != "" && rf.PaymentIntent != it.PaymentIntent) {
			r.t.problemf("item %s: refund %s is %d on %s/%s, want %d on %s%s", it.Item.Item, rf.ID, rf.Amount, rf.Charge, rf.PaymentIntent, it.Want, it.Charge, it.PaymentIntent)
		}
		if !journaled(states, p.Batch, it.Item.Item, rf.ID) {
			r.t.problemf("item %s: no journal says it is refunded by %s", it.Item.Item, rf.ID)
		}
	}
	for item, rs := range live {
		if _, ok := p.lookup(item); !ok {
			r.t.problemf("refund %s names item %s, which is not in the plan", rs[0].ID, item)
		}
	}
	r.checkCharges()
	r.checkIntents(p.Batch, journals...)
}

// mean records that p's refunds are meant to stay at the simulator.
func (r *rig) mean(p *plan) {
	if !slices.Contains(r.meant, p) {
		r.meant = append(r.meant, p)
	}
}

// chargeOf is the simulator's charge id of a plan target (a charge or
// payment intent id), or "" when the simulator has no such charge.
func (r *rig) chargeOf(target string) string { return r.charges[target].ID }

// checkCharges is the promise per charge: no charge at the simulator holds
// more live refunds (of any batch, with or without metadata) than the plans
// meant to run on it intend, and the extra refunds a scenario put there.
// Each refund beyond is a duplicate, counted once however often it is
// checked.
func (r *rig) checkCharges() {
	want := maps.Clone(r.extra)
	for _, p := range r.meant {
		for _, it := range p.Items {
			want[r.chargeOf(it.Charge+it.PaymentIntent)]++
		}
	}
	have := map[string][]string{}
	for _, rf := range r.sim.Refunds() {
		if rf.Status != stripesim.StatusCanceled && rf.Status != stripesim.StatusFailed {
			have[rf.Charge] = append(have[rf.Charge], rf.ID)
		}
	}
	for ch, ids := range have {
		excess := len(ids) - want[ch]
		if excess <= r.dups[ch] {
			continue
		}
		r.t.Dup += excess - r.dups[ch]
		r.dups[ch] = excess
		r.t.problemf("charge %s: %d live refunds (%s), the plans meant %d", ch, len(ids), strings.Join(ids, ", "), want[ch])
	}
}

func journaled(states []*journal.State, batch, item, refundID string) bool {
	for _, st := range states {
		if s, ok := st.Lookup(batch, item); ok && s.Status == journal.StatusRefunded && s.Refund == refundID {
			return true
		}
	}
	return false
}

// checkIntents checks the write-ahead rule: every idempotency key of batch
// the simulator reserved is named by an intent in one of the journals (or
// of those the scenario retired), so no call was made that a crash could
// have left unrecorded.
func (r *rig) checkIntents(batch string, journals ...string) {
	intents := map[string]bool{}
	for _, path := range append(slices.Clone(r.retired), journals...) {
		f, err := os.Open(path)
		if err != nil {
			r.t.problemf("write-ahead check: %v", err)
			continue
		}
		sc := journal.NewScanner(f, path)
		for sc.Scan() {
			if rec := sc.Record(); rec.Type == journal.TypeIntent {
				intents[rec.Key] = true
			}
		}
		if err := sc.Err(); err != nil {
			r.t.problemf("write-ahead check: %v", err)
		}
		f.Close()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	prefix := strings.TrimSuffix(refund.IdempotencyKey(batch, "", 0), ":0") // refundkit:<batch>:
	for key := range r.keys {
		if strings.HasPrefix(key, prefix) && !intents[key] {
			r.t.problemf("the simulator received key %s, which no journaled intent names", key)
		}
	}
}

// snapshot is the complete records of a journal at one moment: the bytes up
// to the end of its last whole line that is a record. A torn final line is
// not a record; after mid-file corruption the whole file counts, since it
// must be left exactly as it is.
type snapshot struct {
	path string
	data []byte
}

func takeSnapshot(path string) snapshot {
	data, err := os.ReadFile(path)
	if err != nil {
		return snapshot{path: path}
	}
	sc := journal.NewScanner(bytes.NewReader(data), path)
	for sc.Scan() {
	}
	if t := sc.Torn(); t != nil && sc.Err() == nil {
		data = data[:t.Offset]
	}
	return snapshot{path: path, data: data}
}

// lost counts the records of s that the journal no longer holds, byte for
// byte, at the same place: from the first line that differs to the end of
// the snapshot.
func (s snapshot) lost() int {
	now, err := os.ReadFile(s.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return bytes.Count(s.data, []byte("\n"))
	}
	if bytes.HasPrefix(now, s.data) {
		return 0
	}
	i := 0
	for i < len(now) && i < len(s.data) && now[i] == s.data[i] {
		i++
	}
	lineStart := bytes.LastIndexByte(s.data[:i], '\n') + 1
	return bytes.Count(s.data[lineStart:], []byte("\n"))
}

// checkKept adds to the tally the records of s the journal lost.
func (r *rig) checkKept(s snapshot) {
	if n := s.lost(); n > 0 {
		r.t.Lost += n
		r.t.problemf("%s lost %d records that were there before the last run", s.path, n)
	}
}

// audit asks bin/audit, offline and then against the simulator, whether the
// journals are clean: both must exit 0. Without bin/audit the simulator's
// own records (checkOnce) are the only check, and the report says so.
func (r *rig) audit(p *plan, journals ...string) {
	if r.m.bins["audit"] == "" {
		return
	}
	offline := r.run(nil, "audit", append([]string{"--plan", p.Path}, journals...)...)
	r.expectExit(offline, "audit --plan (offline) after the final run", 0)
	// --rate 0: the simulator has no rate limit to spare.
	stripe := r.run(nil, "audit", append([]string{"--stripe", "--rate", "0", "--plan", p.Path}, journals...)...)
	if r.expectExit(stripe, "audit --stripe --plan after the final run", 0) && offline.code == 0 {
		r.t.Audits++
	}
}

// finish is the end of a scenario run over one journal: exactly once at
// the simulator, in the journal, and by audit.
func (r *rig) finish(p *plan, journals ...string) {
	r.checkOnce(p, journals...)
	r.audit(p, journals...)
}
