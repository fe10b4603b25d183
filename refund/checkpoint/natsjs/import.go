package natsjs

// journal-merge -o nats://...: the records of journals merged into the
// checkpoint's items.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint"
)

// PartialImportError is an import that stopped after it wrote some of its
// items: each holds all its records of the merge, the others none.
type PartialImportError struct {
	Written, Items int
	Err            error
}

func (e *PartialImportError) Error() string {
	return fmt.Sprintf("the import stopped after it wrote %d of its %d items, each with all its records: %v; the same import again completes it (what an item holds already is not added twice)", e.Written, e.Items, e.Err)
}

func (e *PartialImportError) Unwrap() error { return e.Err }

// beforeImportWrite, when set (tests), runs before each write of an item's
// value: a worker's write there is what compare-and-set must not lose.
var beforeImportWrite func(batch, item string)

// imported is an item as a journal to import holds it.
type imported struct {
	k       key
	lines   []json.RawMessage // canonical record lines (journal.MarshalLine), each once, in the journal's order
	have    map[string]bool   // lines, as a set
	st      journal.ItemState // what lines fold to
	first   int               // the line of its first record
	recs    []*journal.Record // its records and their lines, kept for CheckJournal
	at      []int
	refunds []refundAt // the refund ids its refunded records credit, each once
	pays    []string   // the payments its intents and refunds name
}

// refundAt is a refund id a journal credits, at the line of its first
// refunded record.
type refundAt struct {
	id   string
	line int
}

// readImported reads the journal r, named name, item by item; keep keeps
// the decoded records too.
func readImported(r io.Reader, name string, keep bool) ([]*imported, error) {
	byKey := map[key]*imported{}
	var items []*imported
	err := checkpoint.ScanJournal(r, name, func(rec *journal.Record, line string, at int) {
		k := key{Batch: rec.Batch, Item: rec.Item}
		it := byKey[k]
		if it == nil {
			it = &imported{k: k, have: map[string]bool{}, first: at}
			byKey[k] = it
			items = append(items, it)
		}
		if keep {
			it.recs, it.at = append(it.recs, rec), append(it.at, at)
		}
		if it.have[line] {
			return // the same record twice says nothing more
		}
		it.have[line] = true
		it.lines = append(it.lines, json.RawMessage(line))
		it.st = journal.Next(it.st, rec)
		if rec.Type == journal.TypeRefunded && rec.Refund != "" &&
			!slices.ContainsFunc(it.refunds, func(r refundAt) bool { return r.id == rec.Refund }) {
			it.refunds = append(it.refunds, refundAt{rec.Refund, at})
		}
		if rec.Type == journal.TypeIntent || rec.Type == journal.TypeRefunded {
			// As PostgreSQL's OnPayment finds an item: by what its intents
			// and refunds name.
			p := refund.Payment{Charge: rec.Charge, PaymentIntent: rec.PaymentIntent, Capture: rec.Capture, PSPReference: rec.PSPReference}.ID()
			if p != "" && !slices.Contains(it.pays, p) {
				it.pays = append(it.pays, p)
			}
		}
	})
	return items, err
}

// storedOf reads the values of the items' batches.
func (c *Checkpoint) storedOf(ctx context.Context, items []*imported) (map[key]*entry, error) {
	out := map[key]*entry{}
	seen := map[string]bool{}
	for _, it := range items {
		if seen[it.k.Batch] {
			continue
		}
		seen[it.k.Batch] = true
		es, err := c.readItems(ctx, itemsOf(it.k.Batch))
		if err != nil {
			return nil, c.Wrap("read batch "+it.k.Batch, err)
		}
		for k, e := range es {
			out[k] = e
		}
	}
	return out, nil
}

// Import adds the records of r (journal-merge -o nats://: the merge of what
// Export wrote and more) to their items, each item one value written under
// the revision read, so a worker's write in between is checked again, never
// overwritten; its refund ids are bound and its payments indexed first.
// Nothing is written when anything is refused: a *BusyError for an item a
// worker holds or that holds records r lacks, a *refund.InputError for
// records that rebind an item or credit a refund twice. A failure once an
// item is written is a *PartialImportError. last is not needed: each
// item's records are compared with r's.
func (c *Checkpoint) Import(ctx context.Context, r io.Reader, name string, _ int64) (records int, batches []string, err error) {
	if c.readOnly || c.kv == nil {
		return 0, nil, newError("import", errors.New("the checkpoint was opened for reading only"))
	}
	items, err := readImported(r, name, false)
	if err != nil {
		return 0, nil, err
	}
	stored, err := c.storedOf(ctx, items)
	if err != nil {
		return 0, nil, err
	}

	// Check everything before anything is written.
	type write struct {
		it  *imported
		e   *entry
		ids []string // the refund ids it credits that its value does not yet
	}
	var writes []write
	var held []*itemValue
	var since, input error
	owner := map[string]*imported{}
	for _, it := range items {
		for _, r := range it.refunds {
			if o := owner[r.id]; o != nil && input == nil {
				input = &refund.InputError{Name: name, Err: fmt.Errorf("refund %s is credited to item %q of batch %q and to item %q of batch %q: a refund is one item's; nothing imported", r.id, o.k.Item, o.k.Batch, it.k.Item, it.k.Batch)}
			}
			owner[r.id] = it
		}
		e := stored[it.k]
		_, added, err := c.next(ctx, it, e, name)
		var h *heldError
		switch {
		case errors.As(err, &h):
			held = append(held, h.v)
		case errors.As(err, new(*BusyError)):
			since = cmp.Or(since, err)
		case err != nil:
			input = cmp.Or(input, err)
		case added > 0:
			w := write{it: it, e: e}
			for _, r := range it.refunds {
				if e == nil || !creditedIn(e.val, r.id) {
					w.ids = append(w.ids, r.id)
				}
			}
			writes = append(writes, w)
		}
	}
	if len(held) > 0 {
		return 0, nil, busy(fmt.Sprintf("workers hold %d of the items the import would add records to (item %q of batch %q: %s, claim %d): import once they have stopped; an item whose worker died is held until a run of its batch takes it over, after its lease",
			len(held), held[0].Item, held[0].Batch, held[0].Worker, held[0].Gen))
	}
	if since != nil {
		return 0, nil, since
	}
	if input != nil {
		return 0, nil, input
	}
	for _, w := range writes {
		for _, id := range w.ids {
			var ref itemRef
			_, ok, err := getJSON(ctx, c.kv, refundKey(id), &ref)
			if err != nil {
				return 0, nil, c.Wrap("import", err)
			}
			if ok && (ref.Batch != w.it.k.Batch || ref.Item != w.it.k.Item) {
				return 0, nil, &refund.InputError{Name: name, Err: fmt.Errorf("item %q of batch %q is credited with refund %s, which the checkpoint credits to item %q of batch %q: a refund is one item's; nothing imported", w.it.k.Item, w.it.k.Batch, id, ref.Item, ref.Batch)}
			}
		}
	}

	// Then write, item by item, a few at once: each write waits for the
	// server to store it (and, with sync_interval always, to sync it).
	ok := make([]bool, len(writes))
	var (
		mu      sync.Mutex
		written int
		failed  error
		wg      sync.WaitGroup
	)
	todo := make(chan int)
	for range min(importWriters, len(writes)) {
		wg.Go(func() {
			for i := range todo {
				w := writes[i]
				n, err := c.importItem(ctx, w.it, w.e, w.ids, name)
				mu.Lock()
				if err != nil {
					failed = cmp.Or(failed, err)
				} else {
					ok[i], written, records = n > 0, written+1, records+n
				}
				mu.Unlock()
			}
		})
	}
	for i := range writes {
		mu.Lock()
		stop := failed != nil
		mu.Unlock()
		if stop {
			break
		}
		todo <- i
	}
	close(todo)
	wg.Wait()
	seen := map[string]bool{}
	for i, w := range writes {
		if ok[i] && !seen[w.it.k.Batch] {
			seen[w.it.k.Batch] = true
			batches = append(batches, w.it.k.Batch)
		}
	}
	if failed != nil {
		if written == 0 {
			return 0, nil, failed
		}
		return records, batches, &PartialImportError{Written: written, Items: len(writes), Err: failed}
	}
	return records, batches, nil
}

// importWriters is how many items an import writes at once.
const importWriters = 16

// creditedIn reports whether v's records credit refund id already.
func creditedIn(v *itemValue, id string) bool {
	var rec journal.Record
	for _, line := range v.Records {
		if journal.DecodeLine(line, string(line), &rec) == nil && rec.Type == journal.TypeRefunded && rec.Refund == id {
			return true
		}
	}
	return false
}

// heldError is an item a worker's claim may hold: refused, and counted.
type heldError struct{ v *itemValue }

func (e *heldError) Error() string {
	return fmt.Sprintf("item %q of batch %q is held by %s (claim %d)", e.v.Item, e.v.Batch, e.v.Worker, e.v.Gen)
}

// next is the value an import writes for it, whose value is e (nil: none
// yet), and how many records it adds (0: nothing to write).
func (c *Checkpoint) next(ctx context.Context, it *imported, e *entry, name string) (*itemValue, int, error) {
	ik := itemKey(it.k.Batch, it.k.Item)
	v := &itemValue{Batch: it.k.Batch, Item: it.k.Item}
	var was journal.ItemState
	var known bool
	have := map[string]bool{}
	if e != nil {
		cp := *e.val
		v = &cp
		var rec journal.Record
		for _, line := range v.Records {
			if err := journal.DecodeLine(line, string(line), &rec); err != nil {
				return nil, 0, &CorruptError{Key: ik, Err: err}
			}
			b, err := journal.MarshalLine(nil, &rec)
			if err != nil {
				return nil, 0, &CorruptError{Key: ik, Err: err}
			}
			have[string(b[:len(b)-1])] = true
		}
		var err error
		if was, known, err = v.fold(ik); err != nil {
			return nil, 0, err
		}
	}
	added := 0
	for _, line := range it.lines {
		if !have[string(line)] {
			added++
		}
	}
	if added == 0 {
		return nil, 0, nil // it holds them all
	}
	for line := range have {
		if !it.have[line] {
			return nil, 0, busy(fmt.Sprintf("item %q of batch %q holds records the merge does not: they were written while the merge ran; run the merge again", it.k.Item, it.k.Batch))
		}
	}
	if e != nil && v.Gen > 0 && v.Worker != "" && !v.Released {
		hold, err := c.mayHold(ctx, it.k, was, known)
		if err != nil {
			return nil, 0, err
		}
		if hold {
			return nil, 0, &heldError{v}
		}
	}
	if len(v.Plan) > 0 {
		if err := checkPlan(ik, v, it, name, 0); err != nil {
			return nil, 0, err
		}
	} else if it.st.Rebound {
		return nil, 0, &refund.InputError{Name: name, Err: reboundError(it.k, it.st)}
	} else if err := refund.CheckRecords(it.k.Batch, it.k.Item, it.st); err != nil {
		return nil, 0, &refund.InputError{Name: name, Err: err}
	}
	v.Records = it.lines
	if next := it.st; next.KeyBurned && !was.KeyBurned {
		// Burned by the records imported: this write is the burn, as an
		// Append's (Claimed.BurnedInRun).
		v.BurnPending, v.BurnRev = true, 0
	} else {
		v.BurnRev, v.BurnPending = v.burnRev(revOf(e)), false
	}
	return v, added, nil
}

// checkPlan checks it's records against the plan line v stores, if any: a
// *refund.InputError at line (0: none) when they bind it otherwise.
func checkPlan(ik string, v *itemValue, it *imported, name string, line int) error {
	if len(v.Plan) == 0 {
		return nil
	}
	var pi refund.Item
	if err := json.Unmarshal(v.Plan, &pi); err != nil {
		return &CorruptError{Key: ik, Err: fmt.Errorf("the plan line stored does not decode: %w", err)}
	}
	if err := refund.CheckBinding(&pi, it.st); err != nil {
		return &refund.InputError{Name: name, Line: line, Err: fmt.Errorf("these records disagree with line %d of the plan the checkpoint stores for batch %q: %w", v.Line, it.k.Batch, err)}
	}
	return nil
}

func revOf(e *entry) uint64 {
	if e == nil {
		return 0
	}
	return e.rev
}

// mayHold reports whether a worker may hold the claim k's value names, its
// records folding to st: not once settled (a held item is worked again
// only while its message is queued).
func (c *Checkpoint) mayHold(ctx context.Context, k key, st journal.ItemState, known bool) (bool, error) {
	if !settled(st, known, false) {
		return true, nil
	}
	if settled(st, known, true) || c.work == nil {
		return false, nil
	}
	_, err := c.work.GetLastMsgForSubject(ctx, c.workSubjectOf(k.Batch, k.Item))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	return err == nil, c.Wrap("import", err)
}

func reboundError(k key, st journal.ItemState) error {
	return fmt.Errorf("item %q of batch %q: its records name two different payments (%s first): records of two plans merged? Which payment the item is cannot be told; a person checks its refunds at the provider and plans what is still owed under a new item id", k.Item, k.Batch, paymentText(st.Charge, st.PaymentIntent, st.Capture, st.PSPReference))
}

// paymentText names a payment as records do: "charge ch_1".
func paymentText(charge, intent, capture, psp string) string {
	switch {
	case charge != "":
		return "charge " + charge
	case intent != "":
		return "payment_intent " + intent
	case capture != "":
		return "capture " + capture
	}
	return "psp_reference " + psp
}

// importItem writes it, whose value was e when the import read it: the refund
// ids it credits anew (ids) are bound to it and it is indexed on its payments
// first (both idempotent), so that once its records are stored both hold.
func (c *Checkpoint) importItem(ctx context.Context, it *imported, e *entry, ids []string, name string) (int, error) {
	ik := itemKey(it.k.Batch, it.k.Item)
	for _, id := range ids {
		if err := c.credit(ctx, c.leaseFrom(time.Now()), id, it.k); err != nil {
			return 0, err
		}
	}
	for _, p := range it.pays {
		if err := c.indexPayment(ctx, p, it.k); err != nil {
			return 0, err
		}
	}
	for try := 0; ; try++ {
		v, added, err := c.next(ctx, it, e, name)
		var h *heldError
		if errors.As(err, &h) {
			return 0, busy(h.Error() + ", claimed while the import ran: import once its worker has stopped")
		}
		if err != nil || added == 0 {
			return 0, err
		}
		if beforeImportWrite != nil {
			beforeImportWrite(it.k.Batch, it.k.Item)
		}
		_, err = putJSON(ctx, c.kv, ik, v, revOf(e), e != nil)
		if err == nil {
			return added, nil
		}
		if !raced(err) || try >= 32 {
			return 0, c.Wrap("import item "+it.k.Item+" of batch "+it.k.Batch, err)
		}
		// Written by another since it was read (a worker's claim, a
		// plan's load): read it again.
		var nv itemValue
		rev, ok, err := getJSON(ctx, c.kv, ik, &nv)
		if err != nil {
			return 0, c.Wrap("import", err)
		}
		e = nil
		if ok {
			e = &entry{rev: rev, val: &nv}
		}
	}
}

// indexPayment lists item k among the items of payment p, as LockPayments
// does for an item it locks it for, so that OnPayment finds it.
func (c *Checkpoint) indexPayment(ctx context.Context, p string, k key) error {
	for try := 0; ; try++ {
		var pv paymentValue
		rev, ok, err := getJSON(ctx, c.kv, paymentKey(p), &pv)
		if err != nil {
			return c.Wrap("index payment "+p, err)
		}
		n := len(pv.Items)
		pv.add(k.Batch, k.Item)
		if len(pv.Items) == n {
			return nil // listed already
		}
		_, err = putJSON(ctx, c.kv, paymentKey(p), &pv, rev, ok)
		if raced(err) && try < 32 {
			continue // a worker took or gave up its lock a moment ago: read again
		}
		return c.Wrap("index payment "+p, err)
	}
}

// CheckJournal checks r's records as Import checks the merge and writes
// nothing: a record that rebinds its item or credits a refund twice is a
// *refund.InputError at its line (an item's plan, at its first line).
func (c *Checkpoint) CheckJournal(ctx context.Context, r io.Reader, name string) error {
	items, err := readImported(r, name, true)
	if err != nil {
		return err
	}
	stored := map[key]*entry{}
	if c.kv != nil {
		if stored, err = c.storedOf(ctx, items); err != nil {
			return err
		}
	}
	owner := map[string]*imported{}
	for _, it := range items {
		var st journal.ItemState
		if e := stored[it.k]; e != nil {
			ik := itemKey(it.k.Batch, it.k.Item)
			if err := checkPlan(ik, e.val, it, name, it.first); err != nil {
				return err
			}
			if st, _, err = e.val.fold(ik); err != nil {
				return err
			}
		}
		for i, rec := range it.recs {
			was := st.Rebound
			if st = journal.Next(st, rec); st.Rebound && !was {
				return &refund.InputError{Name: name, Line: it.at[i], Err: fmt.Errorf("item %q of batch %q: this record names %s, but the records before it (the checkpoint's, then this journal's) name %s: records of two plans? Which payment the item is cannot be told; a person checks its refunds at the provider and plans what is still owed under a new item id",
					it.k.Item, it.k.Batch, paymentText(rec.Charge, rec.PaymentIntent, rec.Capture, rec.PSPReference), paymentText(st.Charge, st.PaymentIntent, st.Capture, st.PSPReference))}
			}
		}
		for _, r := range it.refunds {
			id, line := r.id, r.line
			if o := owner[id]; o != nil {
				return &refund.InputError{Name: name, Line: line, Err: fmt.Errorf("refund %s is credited to item %q of batch %q here and to item %q of batch %q before: a refund is one item's", id, it.k.Item, it.k.Batch, o.k.Item, o.k.Batch)}
			}
			owner[id] = it
			if c.kv == nil {
				continue
			}
			var ref itemRef
			_, ok, err := getJSON(ctx, c.kv, refundKey(id), &ref)
			if err != nil {
				return c.Wrap("check "+name, err)
			}
			if ok && (ref.Batch != it.k.Batch || ref.Item != it.k.Item) {
				return &refund.InputError{Name: name, Line: line, Err: fmt.Errorf("item %q of batch %q is credited with refund %s, which the checkpoint credits to item %q of batch %q: a refund is one item's", it.k.Item, it.k.Batch, id, ref.Item, ref.Batch)}
			}
		}
	}
	return nil
}
