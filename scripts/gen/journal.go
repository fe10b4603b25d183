package main

import (
	"bufio"
	"fmt"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// t0 is when every generated run starts.
var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// runShape is a real run to write: items 1..n of the plan `plan --batch
// batch` makes of `gen csv n` (the item id is the charge id).
type runShape struct {
	batch string
	n     int
	// done < n is a run stopped early: items 1..done have their outcome,
	// the next inFlight their intent alone (in doubt), the rest nothing.
	done int
	// dups items, the first ones, were left in doubt and have two refunds,
	// found and journaled by a later run's look-up (source reconciled):
	// audit's duplicates.
	dups   int
	framed bool
}

// inFlight is refund's default -j: that many calls are in flight, so an
// item's outcome follows its intent by that many intents of other items.
const inFlight = 8

// commitRecords is how many records one group commit holds here: with -j 8
// up to 16 records (8 intents, 8 outcomes) wait for one fsync.
const commitRecords = 2 * inFlight

// writeRun writes the journal refund writes for s: for each item an intent
// before its call and its refunded record after it, the records built as
// the engine builds them (refund/engine.go base and intent, refund/answer.go
// settle and adopt) and encoded by journal.MarshalLine, in group commits
// framed by journal.AppendCommit.
func writeRun(w *bufio.Writer, s runShape) error {
	g := &groups{w: w, framed: s.framed}
	g.start()
	started := min(s.n, s.done+inFlight)
	for k := 1; k <= started+inFlight; k++ {
		if k <= started {
			it := runItem(s.batch, k)
			rec := base(journal.TypeIntent, &it, g.records)
			rec.Amount, rec.Currency, rec.Reason = it.Amount, it.Currency, it.Reason
			if err := g.add(rec); err != nil {
				return err
			}
		}
		// A duplicated item's call never came back: its outcome is the
		// later run's, below.
		if i := k - inFlight; i > s.dups && i <= s.done {
			it := runItem(s.batch, i)
			rec := base(journal.TypeRefunded, &it, g.records)
			rec.Refund, rec.Amount, rec.Currency, rec.Status, rec.Source = refundID(i), it.Amount, it.Currency, "succeeded", journal.SourceAPI
			if err := g.add(rec); err != nil {
				return err
			}
		}
	}
	// The first dups items were left in doubt; a later run's look-up finds
	// two refunds for each (a retry elsewhere made a second): adopt
	// journals the first it lists, then the extra one.
	for i := 1; i <= min(s.dups, s.done); i++ {
		it := runItem(s.batch, i)
		for _, id := range []string{refundID(i), fmt.Sprintf("re_dup%010d", i)} {
			rec := base(journal.TypeRefunded, &it, g.records)
			rec.Refund, rec.Amount, rec.Currency, rec.Status, rec.Source = id, it.Amount, it.Currency, "succeeded", journal.SourceReconciled
			if err := g.add(rec); err != nil {
				return err
			}
		}
	}
	return g.flush()
}

// runItem is item i as plan writes it for row i of `gen csv`.
func runItem(batch string, i int) refund.Item {
	return refund.Item{Batch: batch, Item: charge(i), Charge: charge(i), Amount: amount(i), Currency: "usd", Reason: "requested_by_customer"}
}

// base is the engine's base record of an item (refund/engine.go), stamped
// with the k-th record's time: about a millisecond apart, nanoseconds set,
// as time.Now writes them.
func base(t journal.Type, it *refund.Item, k int) *journal.Record {
	ts := t0.Add(time.Duration(k)*time.Millisecond + time.Duration(k*7919%1_000_000))
	return &journal.Record{
		V: journal.Version, Type: t, Time: ts,
		Batch: it.Batch, Item: it.Item, Charge: it.Charge, PaymentIntent: it.PaymentIntent,
		Attempt: 1, Key: refund.IdempotencyKey(it.Batch, it.Item, 1),
	}
}

// refundID is the simulator's id for its i-th refund.
func refundID(i int) string { return fmt.Sprintf("re_sim%010d", i) }

// groups writes records in group commits of commitRecords lines, each
// ended by its commit line as journal.Writer frames them (-unframed: as
// the writers before issue 11 wrote them, which the old core reads).
type groups struct {
	w       *bufio.Writer
	framed  bool
	buf     []byte // the records of the open commit
	pending int    // records in buf
	records int    // records written, the open commit's included
	line    []byte
}

// start begins a new journal file: a writer opening a file that does not
// end in a commit line frames what is there first, with an empty commit.
func (g *groups) start() {
	if g.framed {
		g.buf = journal.AppendCommit(g.buf, nil, 0)
		g.w.Write(g.buf)
		g.buf = g.buf[:0]
	}
}

func (g *groups) add(rec *journal.Record) error {
	var err error
	if g.line, err = journal.MarshalLine(g.line[:0], rec); err != nil {
		return err
	}
	g.buf = append(g.buf, g.line...)
	g.pending++
	g.records++
	if g.pending == commitRecords {
		return g.flush()
	}
	return nil
}

// flush ends the open commit.
func (g *groups) flush() error {
	if g.pending == 0 {
		return nil
	}
	if g.framed {
		g.buf = journal.AppendCommit(g.buf, g.buf, g.pending)
	}
	_, err := g.w.Write(g.buf)
	g.buf, g.pending = g.buf[:0], 0
	return err
}

// writeCompact writes one refunded record per item first, first+step, ...
// up to n, in time order, and dups extra refunds for the first items: the
// records of a completed run (intents are folded away, as --compact would).
func writeCompact(w *bufio.Writer, batch string, first, n, step, dups int) error {
	var buf []byte
	var err error
	emit := func(i int, refundID string) error {
		rec := journal.Record{V: journal.Version, Type: journal.TypeRefunded, Time: t0.Add(time.Duration(i) * time.Millisecond),
			Batch: batch, Item: item(i), Charge: charge(i), Attempt: 1, Key: refund.IdempotencyKey(batch, item(i), 1),
			Amount: amount(i), Currency: "usd", Refund: refundID, Status: "succeeded", Source: journal.SourceAPI}
		buf, err = journal.MarshalLine(buf[:0], &rec)
		if err != nil {
			return err
		}
		_, err = w.Write(buf)
		return err
	}
	for i := first; i <= n; i += step {
		if err := emit(i, fmt.Sprintf("re_gen%010d", i)); err != nil {
			return err
		}
		if i <= dups {
			if err := emit(i, fmt.Sprintf("re_dup%010d", i)); err != nil {
				return err
			}
		}
	}
	return nil
}
