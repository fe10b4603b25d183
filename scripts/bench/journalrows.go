package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The journal rows: restart and audit over a big journal, by the new core,
// the old core and the baselines side by side, on the real shape and on
// the compact one.

// Targets of issue 11, on the real shape at 1,000,000 items.
const (
	restartSpeedup = 1.5 // times faster than the best baseline
	auditSpeedup   = 2.0
	bytesPerItem   = 150 // peak RSS over items
)

// cores are the sides of refundkit: the new core, and the old one when
// the session has its binaries. argv makes the command of a core's binary.
func (b *bench) cores(name string, argv func(exe string, old bool) cmdSpec, check func(result) error) ([]side, error) {
	exe, err := b.tool(name)
	if err != nil {
		return nil, err
	}
	sides := []side{{name: "new", kind: newCore, cmd: argv(exe, false), check: check}}
	if b.baseBin != "" {
		old, err := b.baseTool(name)
		if err != nil {
			return nil, err
		}
		sides = append(sides, side{name: "old " + b.o.BaseRev, kind: oldCore, cmd: argv(old, true), check: check})
	}
	for i := range sides {
		sides[i].shown = b.show(sides[i].cmd)
	}
	return sides, nil
}

// label names a row in its goals.
func (b *bench) label(what string, sh shape) string {
	l := fmt.Sprintf("%s, %s shape, %s items", what, sh.name, num(b.sz.Big))
	if b.sz.Big != fullSizes.Big {
		l += fmt.Sprintf(" (the target is at %s)", num(fullSizes.Big))
	}
	return l
}

// restartRow times refund over a journal that already holds every item of
// the plan, against a dead API, beside the pipelines that find what is
// left to do. First, over the journal of a run stopped with 1% of the
// items left, refund --dry-run and every pipeline must name the same items.
func restartRow(sh shape) func(*bench, *row) error {
	return func(b *bench, r *row) error {
		n := b.sz.Big
		done := n - max(1, n/100)
		r.what = fmt.Sprintf("restart, %s shape: `refund` over a %s-item plan and the complete journal, zero API calls", sh.name, num(n))
		dir, err := b.startRow(r, sh, restartSpeedup, "no figure worse than the old core")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		plan, out := filepath.Join(dir, "plan.jsonl"), filepath.Join(dir, "left.txt")
		if err := b.genPlan(r, sh, plan, n); err != nil {
			return err
		}
		journal, oldJournal, err := b.genJournal(r, sh, filepath.Join(dir, "journal.jsonl"), n, 0, n)
		if err != nil {
			return err
		}
		stopped, oldStopped, err := b.genJournal(r, sh, filepath.Join(dir, "stopped.jsonl"), n, 0, done)
		if err != nil {
			return err
		}
		dead, err := deadAPI()
		if err != nil {
			return err
		}
		// refund restarts over journal (the old core over oldJournal); dry
		// runs it with --dry-run, its result lines kept.
		refund := func(journal, oldJournal string, dry bool) func(string, bool) cmdSpec {
			return func(exe string, old bool) cmdSpec {
				j, name := journal, "new"
				if old {
					j, name = oldJournal, "old"
				}
				c := cmdSpec{argv: []string{exe, "--journal", j, plan}, env: []string{"STRIPE_API_BASE=" + dead}}
				if dry {
					c.argv = []string{exe, "--dry-run", "--journal", j, plan}
					if !old {
						// The journal alone (the API is dead), as an
						// old core's --dry-run was.
						c.argv = []string{exe, "--dry-run", "--offline", "--journal", j, plan}
					}
					c.stdout = filepath.Join(dir, "dry-run-"+name+".jsonl")
				}
				return c
			}
		}

		// What is left: the same items from every side.
		left := n - done
		dry, err := b.cores("refund", refund(stopped, oldStopped, true), exitIs(0))
		if err != nil {
			return err
		}
		var names []string
		var answers [][]string
		for _, s := range append(dry, b.restartBaselines(plan, stopped, out)...) {
			if _, err := b.checked(s.cmd, s.check)(); err != nil {
				return err
			}
			read := readLines
			if s.kind != baseline {
				read = leftItems
			}
			a, err := read(s.cmd.stdout)
			if err != nil {
				return err
			}
			names, answers = append(names, s.name), append(answers, a)
			r.commands = append(r.commands, s.shown+"   # what is left after a stopped run")
		}
		if err := sameAnswer("items left to do after a run stopped with "+num(left)+" left", left, names, answers); err != nil {
			return err
		}

		// The restart itself, and the pipelines over the complete journal.
		skipped := func(res result) error {
			if res.exit != 0 {
				return fmt.Errorf("exit status %d, want 0", res.exit)
			}
			s, err := parseSummary(res.stderr)
			if err != nil {
				return err
			}
			if s.Skipped != int64(n) || s.Creates != 0 || s.Lists != 0 || s.Records != 0 {
				return fmt.Errorf("%d skipped, %d creates and %d reads, %d records written: want %d, 0, 0, 0", s.Skipped, s.Creates, s.Lists, s.Records, n)
			}
			return nil
		}
		sides, err := b.cores("refund", refund(journal, oldJournal, false), skipped)
		if err != nil {
			return err
		}
		// One untimed run of each core keeps its result lines, to check
		// that every item came back skipped.
		for _, s := range sides {
			keep := s.cmd
			keep.stdout = out
			if _, err := b.checked(keep, skipped)(); err != nil {
				return err
			}
			if lines, got, err := countLines(out, `"status":"skipped"`); err != nil || lines != n || got != n {
				return fmt.Errorf("%s: wrote %d result lines, %d of them skipped: want %d of each (%v)", s.shown, lines, got, n, err)
			}
		}
		nothingLeft := func(res result, path string) error {
			if res.exit != 0 {
				return fmt.Errorf("exit status %d, want 0", res.exit)
			}
			if size := fileSize(path); size != 0 {
				return fmt.Errorf("found items left to do (%d bytes) in a complete journal", size)
			}
			return nil
		}
		bases := b.restartBaselines(plan, journal, out)
		for i := range bases {
			path := bases[i].cmd.stdout
			bases[i].check = func(res result) error { return nothingLeft(res, path) }
		}
		if err := b.warm(bases); err != nil {
			return err
		}
		sides = append(sides, bases...)
		// The journals' sizes after the first runs: a restart with nothing
		// to do writes nothing.
		sizes := map[string]int64{journal: fileSize(journal), oldJournal: fileSize(oldJournal)}
		for _, s := range sides {
			r.commands = append(r.commands, s.shown)
		}
		c, err := b.compete(r.name, n, sides)
		if err != nil {
			return err
		}
		for path, size := range sizes {
			if got := fileSize(path); got != size {
				return fmt.Errorf("%s grew from %d to %d bytes over runs that had nothing to do", path, size, got)
			}
		}
		speedup, perItem := 0.0, 0.0
		if sh.real {
			speedup, perItem = restartSpeedup, bytesPerItem
		}
		c.fill(r, b.label("restart", sh), speedup, perItem)
		r.detailf("%s", b.describe(sh, plan, journal))
		r.detailf("What is left: over the journal of a run stopped with the last %s items left (in the real shape the first of them in flight: intent, no outcome), `refund --dry-run` (would_refund or would_reconcile) and every pipeline named the same %s items.", num(left), num(left))
		r.detailf("The restart: zero API calls (`STRIPE_API_BASE` names a loopback port where nothing listens); every run exited 0 with `%s skipped ... 0 creates, 0 payment reads, 0 refund lists, 0 refund reads ... 0 journal records`, an untimed run of each core wrote %s result lines all `skipped`, every pipeline found nothing left, and the journals kept their size.", num(n), num(n))
		r.details = append(r.details, c.table()...)
		return nil
	}
}

// auditRow times an offline audit of a journal holding a few duplicate
// refunds beside the pipelines that find them; every side must name the
// same charges in every run.
func auditRow(sh shape) func(*bench, *row) error {
	return func(b *bench, r *row) error {
		n, dups := b.sz.Big, b.sz.Dups
		r.what = fmt.Sprintf("offline `audit`, %s shape: a journal of %s items with %d duplicate refunds", sh.name, num(n), dups)
		dir, err := b.startRow(r, sh, auditSpeedup, "same duplicates; no figure worse than the old core")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		journal, oldJournal, err := b.genJournal(r, sh, filepath.Join(dir, "journal.jsonl"), n, dups, n)
		if err != nil {
			return err
		}
		out := filepath.Join(dir, "dups.txt")
		findings := func(old bool) string {
			return filepath.Join(dir, "findings-"+map[bool]string{true: "old", false: "new"}[old]+".jsonl")
		}
		var want []string
		// every side must name the dups charges the first side named.
		same := func(name string, read func() ([]string, error), code int) func(result) error {
			return func(res result) error {
				if res.exit != code {
					return fmt.Errorf("exit status %d, want %d", res.exit, code)
				}
				got, err := read()
				if err != nil {
					return err
				}
				if want == nil {
					want = got
				}
				return sameAnswer("charges refunded twice", dups, []string{"the first side", name}, [][]string{want, got})
			}
		}
		sides, err := b.cores("audit", func(exe string, old bool) cmdSpec {
			j := journal
			if old {
				j = oldJournal
			}
			return cmdSpec{argv: []string{exe, j}, stdout: findings(old)}
		}, nil)
		if err != nil {
			return err
		}
		for i := range sides {
			path := sides[i].cmd.stdout
			sides[i].check = same(sides[i].name, func() ([]string, error) { return duplicateCharges(path) }, 1)
		}
		for _, s := range b.auditBaselines(journal, out) {
			path := s.cmd.stdout
			s.check = same(s.name, func() ([]string, error) { return readLines(path) }, 0)
			sides = append(sides, s)
		}
		for _, s := range sides {
			r.commands = append(r.commands, s.shown)
		}
		if err := b.warm(sides); err != nil {
			return err
		}
		c, err := b.compete(r.name, n, sides)
		if err != nil {
			return err
		}
		speedup, perItem := 0.0, 0.0
		if sh.real {
			speedup, perItem = auditSpeedup, bytesPerItem
		}
		c.fill(r, b.label("audit", sh), speedup, perItem)
		r.detailf("%s", b.describe(sh, "", journal))
		r.detailf("Every side found duplicate refunds on the same %d charges in every run: %s (audit's `duplicate` findings, exit 1; the pipelines' `uniq -d`). audit does more than a pipeline: it checks every record, folds each item's state and writes a finding with the refunds, amounts and a remedy.", dups, strings.Join(want, ", "))
		r.details = append(r.details, c.table()...)
		return nil
	}
}

// describe says what a row's inputs are, with their sizes.
func (b *bench) describe(sh shape, plan, journal string) string {
	var s string
	if sh.real {
		s = "Real shape: the journal `refund` writes, an intent and an outcome per item (fields checked against a real run of `refund` on the simulator this session)"
		if plan != "" {
			s += ", and the plan as `plan` writes it from a CSV"
		}
	} else {
		s = "Compact shape: one `refunded` record an item, as a compacted journal holds"
		if plan != "" {
			s += ", and a lean plan (batch, item, charge)"
		}
	}
	s += ". Journal " + mb(fileSize(journal))
	if plan != "" {
		s += ", plan " + mb(fileSize(plan))
	}
	return s + "."
}

// startRow sets a journal row's target (on the real shape, speedup over
// the best baseline and the memory per item too) and checks the real
// shape, then makes an empty directory in the work dir for its files.
func (b *bench) startRow(r *row, sh shape, speedup float64, target string) (dir string, err error) {
	r.target = target
	if sh.real {
		r.target = fmt.Sprintf("%gx faster than the best baseline, <= %d B RSS an item, %s", speedup, bytesPerItem, target)
		if err := b.checkRealShape(); err != nil {
			return "", err
		}
	}
	dir = b.path(r.name)
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	return dir, os.Mkdir(dir, 0o700)
}
