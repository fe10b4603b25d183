package main

import (
	"strings"
	"testing"
)

func TestParseVarz(t *testing.T) {
	got, err := parseVarz([]byte(`{"server_id":"N1","in_msgs":90,"in_client_msgs":57,"out_msgs":80,"out_client_msgs":60}`))
	if err != nil || got != 57 {
		t.Errorf("parseVarz = %d, %v; want 57", got, err)
	}
	if _, err := parseVarz([]byte(`{"in_msgs":90}`)); err == nil {
		t.Error("parseVarz without in_client_msgs: no error")
	}
	if _, err := parseVarz([]byte(`<html>`)); err == nil {
		t.Error("parseVarz of a non-JSON answer: no error")
	}
}

// TestParseJSZ checks that only the key-value buckets' streams count, by
// their last sequence (every write), not by the messages they keep.
func TestParseJSZ(t *testing.T) {
	const jsz = `{"streams":2,"account_details":[{"name":"$G","id":"$G","stream_detail":[
		{"name":"KV_refundkit_bench","state":{"messages":4001,"bytes":1,"first_seq":3,"last_seq":28007}},
		{"name":"refundkit_bench_work","state":{"messages":0,"first_seq":4001,"last_seq":4000}}]},
		{"name":"OTHER","stream_detail":[{"name":"KV_x","state":{"messages":1,"last_seq":3}}]}]}`
	got, err := parseJSZ([]byte(jsz))
	if err != nil || got != 28010 {
		t.Errorf("parseJSZ = %d, %v; want 28010", got, err)
	}
	if got, err := parseJSZ([]byte(`{"streams":0,"account_details":[{"name":"$G"}]}`)); err != nil || got != 0 {
		t.Errorf("parseJSZ of a server without streams = %d, %v; want 0", got, err)
	}
}

// TestWorkersTable checks that a workers row's header and lines have as
// many cells as each other, the ratios are the first side's, and the
// per-item counts come last.
func TestWorkersTable(t *testing.T) {
	sides := []workerSide{{name: "NATS, N processes", short: "NATS"}, {name: "PostgreSQL, N processes", short: "PostgreSQL"}, {name: "file journal, 1 process -j 8×N", short: "file 1 process"}}
	cols := []perItem{{header: "NATS KV writes per item"}}
	header := workersHeader(sides, cols)
	want := "| latency | N | NATS, N processes: items/s (median; runs) | PostgreSQL, N processes | file journal, 1 process -j 8×N | NATS / PostgreSQL | NATS / file 1 process | NATS KV writes per item |"
	if header != want {
		t.Errorf("header\n%s\nwant\n%s", header, want)
	}
	line := workersLine("zero latency", 4, [][]float64{{100, 90, 110}, {200, 200, 200}, {50, 40, 60}}, []float64{7})
	if want := "| zero latency | 4 | 100 (100, 90, 110) | 200 (200, 200, 200) | 50 (50, 40, 60) | 0.50x | 2.00x | 7.0 |"; line != want {
		t.Errorf("line\n%s\nwant\n%s", line, want)
	}
	rule := tableRule(1, 2*len(sides)+len(cols))
	for _, l := range []string{line, rule} {
		if strings.Count(l, "|") != strings.Count(header, "|") {
			t.Errorf("%q has %d cells, the header %d", l, strings.Count(l, "|")-1, strings.Count(header, "|")-1)
		}
	}
	if !strings.HasPrefix(rule, "| --- | ---: |") {
		t.Errorf("rule %q: want the latency left-aligned and N right-aligned", rule)
	}
}
