// Command gen writes the large inputs the benchmarks and chaos runs need,
// so none of them is committed: a CSV of charges, the plan of it, a journal
// that completes the plan, and shard journals.
//
//	go run ./scripts/gen csv N > charges.csv
//	go run ./scripts/gen plan N BATCH > plan.jsonl
//	go run ./scripts/gen journal N BATCH [DUPLICATES] > j.jsonl
//	go run ./scripts/gen shards N BATCH K DIR     (K journals DIR/shard-K.jsonl)
//
// Charge ids follow the simulator's generator (ch_sim0000001, ...), so a
// plan made here can be refunded against `stripe-sim --charges N`.
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: gen csv|plan|journal|shards N ...")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 1 {
		return fmt.Errorf("N %q: want a positive number", args[1])
	}
	arg := func(i int, def string) string {
		if len(args) > i {
			return args[i]
		}
		return def
	}
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer out.Flush()
	switch args[0] {
	case "csv":
		fmt.Fprintln(out, "charge,amount,currency,reason")
		for i := 1; i <= n; i++ {
			fmt.Fprintf(out, "%s,%d,usd,requested_by_customer\n", charge(i), 100)
		}
	case "plan":
		for i := 1; i <= n; i++ {
			// No amount: a full refund, valid whatever the simulator charged.
			fmt.Fprintf(out, `{"batch":%q,"item":%q,"charge":%q}`+"\n", arg(2, "bench"), item(i), charge(i))
		}
	case "journal":
		dups, _ := strconv.Atoi(arg(3, "0"))
		return writeJournal(out, arg(2, "bench"), 1, n, 1, dups)
	case "shards":
		k, err := strconv.Atoi(arg(3, "8"))
		if err != nil || k < 1 {
			return fmt.Errorf("K %q: want a positive number", arg(3, ""))
		}
		for s := 0; s < k; s++ {
			f, err := os.OpenFile(filepath.Join(arg(4, "."), fmt.Sprintf("shard-%d.jsonl", s+1)), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			w := bufio.NewWriterSize(f, 1<<20)
			if err := writeJournal(w, arg(2, "bench"), s+1, n, k, 0); err != nil {
				return err
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown kind %q", args[0])
	}
	return nil
}

func charge(i int) string { return fmt.Sprintf("ch_sim%07d", i) }
func item(i int) string   { return "it" + strconv.Itoa(i) }
func amount(i int) int64  { return int64(100 + i%9900) }

// writeJournal writes one refunded record per item first, first+step, ...
// up to n, in time order, and dups extra refunds for the first items: the
// records of a completed run (intents are folded away, as --compact would).
func writeJournal(w *bufio.Writer, batch string, first, n, step, dups int) error {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
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
