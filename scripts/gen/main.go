// Command gen writes the large inputs the benchmarks and chaos runs need,
// so none of them is committed: a CSV of charges, plans, the journal of a
// real run, a compacted journal, and shard journals.
//
//	go run ./scripts/gen csv N > charges.csv
//	go run ./scripts/gen plan N BATCH > plan.jsonl          (the compact plan: no amount)
//	go run ./scripts/gen run N BATCH [DUPLICATES [DONE]] [-unframed] > j.jsonl
//	go run ./scripts/gen journal N BATCH [DUPLICATES] > j.jsonl
//	go run ./scripts/gen shards N BATCH K DIR     (K journals DIR/shard-K.jsonl)
//
// run writes what `refund --journal j.jsonl` writes for the plan that
// `plan --batch BATCH charges.csv` makes of `gen csv N`: an intent and an
// outcome per item. journal writes the compact shape of the same run: one
// refunded record an item, intents folded away, for the plan of `gen plan`.
//
// Charge ids follow the simulator's generator (ch_sim0000001, ...), so a
// plan made here can be refunded against `stripe-sim --charges N`.
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	unframed := slices.Contains(args, "-unframed")
	args = slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "-unframed" })
	if len(args) < 2 {
		return fmt.Errorf("usage: gen csv|plan|run|journal|shards N ...")
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
	count := func(i int, def int) (int, error) {
		v, err := strconv.Atoi(arg(i, strconv.Itoa(def)))
		if err != nil || v < 0 {
			return 0, fmt.Errorf("%q: want a whole number", arg(i, ""))
		}
		return v, nil
	}
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer out.Flush()
	switch args[0] {
	case "csv":
		fmt.Fprintln(out, "charge,amount,currency,reason")
		for i := 1; i <= n; i++ {
			fmt.Fprintf(out, "%s,%d,usd,requested_by_customer\n", charge(i), amount(i))
		}
	case "plan":
		for i := 1; i <= n; i++ {
			// No amount: a full refund, valid whatever the simulator charged.
			fmt.Fprintf(out, `{"batch":%q,"item":%q,"charge":%q}`+"\n", arg(2, "bench"), item(i), charge(i))
		}
	case "run":
		dups, err := count(3, 0)
		if err != nil {
			return err
		}
		done, err := count(4, n)
		if err != nil {
			return err
		}
		return writeRun(out, runShape{batch: arg(2, "bench"), n: n, done: min(done, n), dups: dups, framed: !unframed})
	case "journal":
		dups, err := count(3, 0)
		if err != nil {
			return err
		}
		return writeCompact(out, arg(2, "bench"), 1, n, 1, dups)
	case "shards":
		k, err := strconv.Atoi(arg(3, "8"))
		if err != nil || k < 1 {
			return fmt.Errorf("K %q: want a positive number", arg(3, ""))
		}
		for s := 0; s < k; s++ {
			if err := writeShard(filepath.Join(arg(4, "."), fmt.Sprintf("shard-%d.jsonl", s+1)), arg(2, "bench"), s+1, n, k); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown kind %q", args[0])
	}
	return nil
}

func writeShard(path, batch string, first, n, step int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := writeCompact(w, batch, first, n, step, 0); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func charge(i int) string { return fmt.Sprintf("ch_sim%07d", i) }
func item(i int) string   { return "it" + strconv.Itoa(i) }
func amount(i int) int64  { return int64(100 + i%9900) }
