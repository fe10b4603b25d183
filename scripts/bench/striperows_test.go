package main

import (
	"testing"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

func TestParseTold(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"refund: 6 items: 6 refunded; 20 journal records in 6 fsyncs; 6 refunds settled by Stripe's events, with no request", 6},
		{"refund: 1 items: 1 refunded; 1 refund settled by Stripe's events, with no request", 1},
		{"refund: 6 items: 6 refunded, 0 skipped", 0},
	} {
		if got := parseTold(c.in); got != c.want {
			t.Errorf("parseTold(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestLookups(t *testing.T) {
	st := stripesim.Stats{Requests: map[string]int64{"GET /v1/refunds/{id}": 3, "GET /v1/refunds": 2, "GET /v1/charges/{id}": 1, "POST /v1/refunds": 50}}
	if got := lookups(st); got != 6 {
		t.Fatalf("lookups = %d, want 6 (creates not counted)", got)
	}
}

func TestParseReceiverBench(t *testing.T) {
	out := `goos: linux
BenchmarkReceiver/serial-2         	    2515	    415627 ns/op	      2406 events/s	         1.000 fsyncs/event	   23205 B/op	     277 allocs/op
BenchmarkReceiver/parallel-2       	    5383	    253808 ns/op	      3940 events/s	         0.1417 fsyncs/event	   23259 B/op	     274 allocs/op
BenchmarkReceiver/serial-2         	    2400	    420000 ns/op	      2380 events/s	         1.000 fsyncs/event	   23205 B/op	     277 allocs/op
PASS
`
	m, err := parseReceiverBench(out)
	if err != nil {
		t.Fatal(err)
	}
	if s := m["serial"]; len(s.eventsPerSec) != 2 || s.eventsPerSec[0] != 2406 || s.fsyncsPerEvent[1] != 1 {
		t.Errorf("serial: %+v", s)
	}
	if p := m["parallel"]; len(p.eventsPerSec) != 1 || p.fsyncsPerEvent[0] != 0.1417 {
		t.Errorf("parallel: %+v", p)
	}
	if _, err := parseReceiverBench("BenchmarkReceiver/serial-2 1 2 ns/op 3 events/s 1 fsyncs/event\n"); err == nil {
		t.Error("no parallel result: want an error")
	}
}
