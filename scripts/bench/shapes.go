package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// shape is the kind of journal and plan a row reads.
type shape struct {
	name string
	// real is what a run writes: an intent and an outcome per item, and the
	// plan as `plan` writes it from a CSV. Otherwise the compact shape: one
	// refunded record an item (a compacted journal) and a lean plan.
	real bool
}

var (
	realShape    = shape{"real", true}
	compactShape = shape{"compact", false}
)

// batch names the batch of every generated plan and journal.
const batch = "B"

// genPlan writes the shape's plan of n items to path.
func (b *bench) genPlan(r *row, sh shape, path string, n int) error {
	if !sh.real {
		return b.gen2(r, path, "plan", n, batch)
	}
	exe, err := b.tool("plan")
	if err != nil {
		return err
	}
	csv := filepath.Join(filepath.Dir(path), "charges.csv")
	defer os.Remove(csv)
	if err := b.gen2(r, csv, "csv", n); err != nil {
		return err
	}
	c := cmdSpec{argv: []string{exe, "--batch", batch, csv}, stdout: path}
	r.commands = append(r.commands, b.show(c))
	_, err = b.checked(c, exitIs(0))()
	return err
}

// genJournal writes the shape's journal of a run over n items that got
// through done of them, with dups items refunded twice, to path; and, when
// the session has an old core, a copy of its own for it (a real-shape one
// without commit lines, which the old core cannot read): the new core may
// frame a journal it opens, and the old core must still read its own.
func (b *bench) genJournal(r *row, sh shape, path string, n, dups, done int) (newPath, oldPath string, err error) {
	gen := func(path string, unframed bool) error {
		if !sh.real {
			// The compact journal of a run stopped early: its first done items.
			return b.gen2(r, path, "journal", done, batch, dups)
		}
		if unframed {
			return b.gen2(r, path, "run", n, batch, dups, done, "-unframed")
		}
		return b.gen2(r, path, "run", n, batch, dups, done)
	}
	if err := gen(path, false); err != nil || b.baseBin == "" {
		return path, path, err
	}
	old := strings.TrimSuffix(path, ".jsonl") + "-old.jsonl"
	return path, old, gen(old, true)
}

// checkRealShape runs refund for real against the simulator over a small
// plan made by plan, and compares its journal with gen's run of the same
// plan: the same record types, each with the same fields in the same
// order, so the real-shape rows measure what a run writes. Once a session.
func (b *bench) checkRealShape() error {
	if b.shapeChecked {
		return b.shapeErr
	}
	b.shapeChecked = true
	const n = 200
	r := &row{}
	plan, genned := b.path("shape-plan.jsonl"), b.path("shape-gen.jsonl")
	defer removeAll(plan, genned, b.path("sim-journal.jsonl"))
	err := b.genPlan(r, realShape, plan, n)
	if err == nil {
		_, err = b.refundOnSim(n, plan, b.simArgs(n), []string{"--rate", "0"}, false)
	}
	if err == nil {
		err = b.gen2(r, genned, "run", n, batch)
	}
	var real, gen recordShapes
	if err == nil {
		real, err = readShapes(b.path("sim-journal.jsonl"))
	}
	if err == nil {
		gen, err = readShapes(genned)
	}
	if err == nil {
		err = sameShapes(real, gen)
	}
	if err != nil {
		b.shapeErr = fmt.Errorf("the generated real shape is not what refund writes: %w", err)
	}
	return b.shapeErr
}

// recordShapes are a journal's record types, each with its fields in
// order and how many lines it has.
type recordShapes struct {
	fields map[string]string // type: fields, comma-separated
	lines  map[string]int
}

func readShapes(path string) (recordShapes, error) {
	s := recordShapes{fields: map[string]string{}, lines: map[string]int{}}
	f, err := os.Open(path)
	if err != nil {
		return s, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		typ, keys, err := fieldOrder(sc.Bytes())
		if err != nil {
			return s, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		if prev, ok := s.fields[typ]; ok && prev != keys {
			return s, fmt.Errorf("%s:%d: a %s record with fields %s, another with %s", path, line, typ, keys, prev)
		}
		s.fields[typ] = keys
		s.lines[typ]++
	}
	return s, sc.Err()
}

// fieldOrder reads a flat JSON object: its "type" and its keys in order.
func fieldOrder(line []byte) (typ, keys string, err error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", "", fmt.Errorf("not a JSON object")
	}
	var names []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return "", "", err
		}
		v, err := dec.Token()
		if err != nil {
			return "", "", err
		}
		if _, nested := v.(json.Delim); nested {
			return "", "", fmt.Errorf("field %v: not a flat record", k)
		}
		names = append(names, k.(string))
		if k == "type" {
			typ, _ = v.(string)
		}
	}
	return typ, strings.Join(names, ","), nil
}

func sameShapes(real, gen recordShapes) error {
	for _, typ := range slices.Sorted(maps.Keys(real.fields)) {
		g, ok := gen.fields[typ]
		switch {
		case !ok && typ == "commit":
			return errors.New("refund frames its group commits with commit lines and gen does not: frame gen's groups with journal.AppendCommit")
		case !ok:
			return fmt.Errorf("refund wrote %d %s records, gen none", real.lines[typ], typ)
		case g != real.fields[typ]:
			return fmt.Errorf("%s records: refund writes the fields %s, gen %s", typ, real.fields[typ], g)
		case typ != "commit" && gen.lines[typ] != real.lines[typ]:
			return fmt.Errorf("%s records: refund wrote %d, gen %d", typ, real.lines[typ], gen.lines[typ])
		}
	}
	for typ := range gen.fields {
		if _, ok := real.fields[typ]; !ok {
			return fmt.Errorf("gen wrote %d %s records, refund none", gen.lines[typ], typ)
		}
	}
	return nil
}

// fileSize is the size of path in bytes, or -1.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// mb writes a byte count in megabytes.
func mb(n int64) string { return strconv.FormatFloat(float64(n)/1e6, 'f', 0, 64) + " MB" }
