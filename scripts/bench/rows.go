package main

import (
	"fmt"
	"os"
	"time"
)

// verdict is how a row came out.
type verdict int

const (
	reported verdict = iota // no target: the figure is for scale
	met
	missed
	failed // a binary is missing or a check refused a run: no figure
)

// row is one line of the results table and its details.
type row struct {
	name     string
	what     string
	cand     string // refundkit's figure
	base     string // the baseline's figure
	ratio    string
	target   string
	verdict  verdict
	err      error
	commands []string // as the report shows them
	details  []string // markdown lines
	goals    []goal   // the targets this row judges
}

// goal is one of the targets, judged on a row's figures.
type goal struct {
	ok   bool
	text string
}

func (r *row) goal(ok bool, format string, args ...any) {
	r.goals = append(r.goals, goal{ok, fmt.Sprintf(format, args...)})
}

// judge sets the verdict from whether the target was met.
func (r *row) judge(ok bool) {
	r.verdict = missed
	if ok {
		r.verdict = met
	}
}

func (r *row) detailf(format string, args ...any) {
	r.details = append(r.details, fmt.Sprintf(format, args...))
}

// rows are the measurements, in the order they run.
var rows = []struct {
	name string
	run  func(*bench, *row) error
}{
	{"restart", restartRow(realShape)},
	{"audit", auditRow(realShape)},
	{"restart-compact", restartRow(compactShape)},
	{"audit-compact", auditRow(compactShape)},
	{"refund", (*bench).refundFull},
	{"rate", (*bench).refundRate},
	{"lookup", (*bench).lookupCost},
	{"pacing", (*bench).pacing},
	{"requests", (*bench).requests},
	{"adyen", (*bench).adyenRefund},
	{"adyen-settle", (*bench).adyenSettle},
	{"adyen-webhook", (*bench).adyenWebhook},
	{"stripe-settle", (*bench).stripeSettle},
	{"stripe-webhook", (*bench).stripeWebhook},
	{"merge", (*bench).merge},
	{"plan", (*bench).plan},
	{"pg-workers", (*bench).pgWorkers},
	{"pg-claim", (*bench).pgClaimCost},
	{"nats-workers", (*bench).natsWorkers},
	{"nats-claim", (*bench).natsClaimCost},
	{"budget", (*bench).budget},
}

func rowNames() []string {
	var names []string
	for _, r := range rows {
		names = append(names, r.name)
	}
	return names
}

// gen2 generates an input with gen and records the command in the row.
func (b *bench) gen2(r *row, path, kind string, args ...any) error {
	argv := []string{kind}
	for _, a := range args {
		argv = append(argv, fmt.Sprint(a))
	}
	shown, err := b.generate(path, argv...)
	r.commands = append(r.commands, shown)
	return err
}

// fsyncLatency times rounds of appending one journal-sized line to a file
// in the work dir and fsyncing it: the floor under one durable write.
func (b *bench) fsyncLatency(rounds int) ([]time.Duration, error) {
	path := b.path("fsync-probe.jsonl")
	defer os.Remove(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	line := []byte(`{"v":1,"type":"intent","ts":"2026-11-01T00:00:00.001Z","batch":"B","item":"it1","charge":"ch_sim0000001","attempt":1,"key":"refundkit:B:it1:1"}` + "\n")
	var ds []time.Duration
	for range rounds {
		start := time.Now()
		if _, err := f.Write(line); err != nil {
			return nil, err
		}
		if err := f.Sync(); err != nil {
			return nil, err
		}
		ds = append(ds, time.Since(start))
	}
	return ds, nil
}
