package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParsePending(t *testing.T) {
	for in, want := range map[string]int64{
		"refund: 2000 items: 0 refunded, 0 skipped, 0 failed, 0 in_doubt, 2000 pending; 2000 creates, 0 payment reads, 2000 notification look-ups, 0 refund reads\n":       2000,
		"refund: 2000 items: 2000 refunded, 0 skipped, 0 failed, 0 in_doubt; refunded 2,000.00 EUR; 0 creates, 0 payment reads, 0 notification look-ups, 0 refund reads\n": 0,
	} {
		if got := parsePending(in); got != want {
			t.Errorf("parsePending(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestPerfFsyncs(t *testing.T) {
	out := "# started on Wed Dec  2 00:11:38 2026\n\n1149,,syscalls:sys_enter_fsync,13834573,100.00,,\n2,,syscalls:sys_enter_fdatasync,13834573,100.00,,\n"
	if n, err := perfFsyncs(out); err != nil || n != 1151 {
		t.Errorf("perfFsyncs = %d, %v; want 1151", n, err)
	}
	for _, bad := range []string{"", "# started on ...\n", "<not counted>,,syscalls:sys_enter_fsync,0,100.00,,\n"} {
		if _, err := perfFsyncs(bad); err == nil {
			t.Errorf("perfFsyncs(%q): no error", bad)
		}
	}
}

func TestParseFileAdd(t *testing.T) {
	out := `goos: linux
BenchmarkFileAdd/serial-2         	    3831	    296489 ns/op	         1.000 fsyncs/op	     968 B/op	      11 allocs/op
BenchmarkFileAdd/parallel-2       	   20000	     64753 ns/op	         0.1200 fsyncs/op	    1012 B/op	      12 allocs/op
BenchmarkFileAdd/serial-2         	    3831	    322630 ns/op	         1.000 fsyncs/op	     968 B/op	      11 allocs/op
BenchmarkFileAdd/parallel-2       	   20000	     50902 ns/op	         0.1100 fsyncs/op	    1012 B/op	      12 allocs/op
PASS
`
	m, err := parseFileAdd(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := m["serial"].nsPerOp; !slices.Equal(got, []float64{296489, 322630}) {
		t.Errorf("serial ns/op %v", got)
	}
	if got := m["parallel"].fsyncsPerOp; !slices.Equal(got, []float64{0.12, 0.11}) {
		t.Errorf("parallel fsyncs/op %v", got)
	}
	if _, err := parseFileAdd("PASS\n"); err == nil {
		t.Error("no results: no error")
	}
}

// TestWriteAdyenPlan checks the plan's lines: one refund of 1.00 EUR of
// each simulated payment, in order.
func TestWriteAdyenPlan(t *testing.T) {
	p := filepath.Join(t.TempDir(), "plan.jsonl")
	if err := writeAdyenPlan(p, 2); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"batch":"B","item":"it1","psp_reference":"SIMPAY0000000001","amount":100,"currency":"eur"}
{"batch":"B","item":"it2","psp_reference":"SIMPAY0000000002","amount":100,"currency":"eur"}
`
	if string(data) != want {
		t.Errorf("plan:\n%s\nwant:\n%s", data, want)
	}
}
