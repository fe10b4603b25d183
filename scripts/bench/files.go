package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// duplicateCharges reads audit's findings and returns the charges of its
// duplicate findings, sorted.
func duplicateCharges(path string) ([]string, error) {
	return pickLines(path, func(line []byte) (string, bool, error) {
		var fd struct {
			Finding       string `json:"finding"`
			Charge        string `json:"charge"`
			PaymentIntent string `json:"payment_intent"`
		}
		err := json.Unmarshal(line, &fd)
		return fd.Charge + fd.PaymentIntent, fd.Finding == "duplicate", err
	})
}

// leftItems reads refund --dry-run's result lines: the items it would
// refund or reconcile first, sorted.
func leftItems(path string) ([]string, error) {
	return pickLines(path, func(line []byte) (string, bool, error) {
		var res struct{ Item, Status string }
		err := json.Unmarshal(line, &res)
		return res.Item, strings.HasPrefix(res.Status, "would_"), err
	})
}

// pickLines reads the JSON lines of path and returns, sorted, what pick
// takes from the lines it keeps.
func pickLines(path string, pick func([]byte) (string, bool, error)) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		s, keep, err := pick(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", filepath.Base(path), line, err)
		}
		if keep {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out, sc.Err()
}

// sameFile tells whether two files hold the same bytes.
func sameFile(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	ra, rb := bufio.NewReaderSize(fa, 1<<20), bufio.NewReaderSize(fb, 1<<20)
	bufA, bufB := make([]byte, 1<<16), make([]byte, 1<<16)
	for {
		na, errA := io.ReadFull(ra, bufA)
		nb, errB := io.ReadFull(rb, bufB)
		if na != nb || !bytes.Equal(bufA[:na], bufB[:nb]) {
			return false, nil
		}
		endA := errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF)
		endB := errors.Is(errB, io.EOF) || errors.Is(errB, io.ErrUnexpectedEOF)
		if errA != nil && !endA {
			return false, errA
		}
		if errB != nil && !endB {
			return false, errB
		}
		if endA || endB {
			return endA && endB, nil
		}
	}
}

// sameLineSet tells whether two files hold the same record lines (commit
// lines are framing), whatever their order, by comparing an order-independent hash: the sum of the lines'
// FNV-1a hashes.
func sameLineSet(a, b string) (bool, error) {
	ha, err := lineSetHash(a)
	if err != nil {
		return false, err
	}
	hb, err := lineSetHash(b)
	return err == nil && ha == hb, err
}

func lineSetHash(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var sum uint64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(commitType)) {
			continue
		}
		h := fnv.New64a()
		h.Write(sc.Bytes())
		sum += h.Sum64()
	}
	return sum, sc.Err()
}

func removeAll(paths ...string) {
	for _, p := range paths {
		os.RemoveAll(p)
	}
}

// countLines counts the lines of a file, and those that contain sub.
func countLines(path, sub string) (lines, matching int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines++
		if sub != "" && bytes.Contains(sc.Bytes(), []byte(sub)) {
			matching++
		}
	}
	return lines, matching, sc.Err()
}

// commitType is in a journal's commit lines only: they frame group commits
// and are not records.
const commitType = `"type":"commit"`

// chargeIDs writes the charge ids of a plan, one a line: a charge list
// bin/plan reads.
func chargeIDs(plan, out string) error {
	f, err := os.Open(plan)
	if err != nil {
		return err
	}
	defer f.Close()
	var ids strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var it struct{ Charge string }
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
			return err
		}
		ids.WriteString(it.Charge + "\n")
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return os.WriteFile(out, []byte(ids.String()), 0o600)
}
