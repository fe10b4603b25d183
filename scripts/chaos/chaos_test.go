package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// testWriter sends the matrix's log to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// TestSizesTags: every count of sizes has a quick and a full value in its
// tag, the full one at least the quick one.
func TestSizesTags(t *testing.T) {
	q, f := reflect.ValueOf(sizesOf(true)), reflect.ValueOf(sizesOf(false))
	for i := range q.NumField() {
		if q.Field(i).Int() <= 0 || f.Field(i).Int() < q.Field(i).Int() {
			t.Errorf("sizes.%s: quick %d, full %d", q.Type().Field(i).Name, q.Field(i).Int(), f.Field(i).Int())
		}
	}
}

// TestChaosQuick runs the quick fault matrix over freshly built binaries:
// every scenario must end clean, and must have injected what it is about
// (a matrix that injected nothing would prove nothing).
func TestChaosQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault matrix runs the real binaries: not in -short")
	}
	bin := t.TempDir()
	if _, err := crashrig.Build(bin); err != nil {
		t.Fatal(err)
	}
	rep, err := runMatrix(options{Quick: true, Bin: bin, Seed: 1, Command: "go test ./scripts/chaos", ExecDir: "../../testdata/exec", Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != len(scenarios) {
		t.Fatalf("%d scenarios ran, want %d", len(rep.Rows), len(scenarios))
	}
	for _, row := range rep.Rows {
		if row.Skipped != "" {
			t.Logf("%s: not run: %s", row.Name, row.Skipped)
			continue
		}
		if !row.clean() {
			t.Errorf("%s: %s\n%s", row.Name, row.line(), strings.Join(row.Problems, "\n"))
		}
		if row.Seeds == 0 || row.Items == 0 || row.Runs == 0 {
			t.Errorf("%s: %d seeds, %d items, %d refund runs: it checked nothing", row.Name, row.Seeds, row.Items, row.Runs)
		}
		for _, kind := range row.injected {
			if row.injectedN[kind] == 0 && !optionalInjection[kind] && !optionalInjection[row.Name+": "+kind] {
				t.Errorf("%s: no %s injected", row.Name, kind)
			}
		}
		if len(row.injected) == 0 {
			t.Errorf("%s: nothing injected", row.Name)
		}
	}
	var md bytes.Buffer
	if err := rep.writeMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, sc := range scenarios {
		if !strings.Contains(md.String(), "| "+sc.Title+" |") {
			t.Errorf("the report has no row for %q", sc.Title)
		}
	}
}

// optionalInjection are faults a quick run may draw none of, in any row
// or ("row: kind") in one: the PayPal faults row draws each of its five
// from two dozen items, the Adyen faults row its outcomes from 40.
var optionalInjection = map[string]bool{
	"answers dropped after commit":                         true,
	"paypal-faults: 500 before commit":                     true,
	"paypal-faults: 500 after commit":                      true,
	"paypal-faults: gateway 504s while the refund went on": true,
	"paypal-faults: gateway 502s after commit":             true,
	// The Adyen faults row draws each of these from 40 items.
	"adyen-faults: 429 answers":                           true,
	"adyen-faults: 500 before commit":                     true,
	"adyen-faults: 500 after commit":                      true,
	"adyen-faults: gateway 504s while the refund went on": true,
	"adyen-faults: refunds refused":                       true,
	"adyen-faults: refunds failed later":                  true,
	"adyen-faults: refunds reversed":                      true,
}

func TestFirstBadLine(t *testing.T) {
	valid := func(item string) string {
		return fmt.Sprintf(`{"batch":"b","item":%q,"charge":"ch_1"}`, item)
	}
	tests := []struct {
		name     string
		input    string
		bad      int
		accepted int
	}{
		{"all valid", valid("a") + "\n" + valid("b") + "\n", 0, 2},
		{"blank lines are skipped", valid("a") + "\n\n \t\r\n" + valid("b"), 0, 2},
		{"bad second line", valid("a") + "\n{\"batch\":\"b\"}\n" + valid("c") + "\n", 2, 1},
		{"item twice", valid("a") + "\n" + valid("b") + "\n" + valid("a") + "\n", 3, 2},
		{"newline inside a mutated line", valid("a") + "\n{\"batch\":\n\"b\"}\n", 2, 1},
		{"line too long", valid("a") + "\n" + strings.Repeat(" ", refund.MaxLineBytes+1) + "\n", 2, 1},
		{"negative amount", `{"batch":"b","item":"a","charge":"ch_1","amount":-1}` + "\n", 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad, accepted := firstBadLine([]byte(tt.input))
			if bad != tt.bad || len(accepted) != tt.accepted {
				t.Errorf("firstBadLine = line %d, %d accepted; want line %d, %d accepted", bad, len(accepted), tt.bad, tt.accepted)
			}
		})
	}
}

func TestParseSummary(t *testing.T) {
	line := "refund: 24 items: 20 refunded, 3 skipped, 1 failed, 0 in_doubt; refunded 1500 usd; 26 creates, 0 payment reads, 2 refund lists, 0 refund reads, 5 retried, 4 rate-limited, 2 reconciled, 1 new keys; 48 journal records in 30 fsyncs\n"
	got, ok := parseSummary("refund: other line\n" + line)
	want := summary{Items: 24, Refunded: 20, Skipped: 3, Failed: 1, Creates: 26, Lists: 2, Retried: 5, RateLimited: 4, Reconciled: 2, NewKeys: 1}
	if !ok || got != want {
		t.Errorf("parseSummary = %+v, %v; want %+v", got, ok, want)
	}
	if _, ok := parseSummary("refund: interrupted\n"); ok {
		t.Error("parseSummary found a summary in a line without one")
	}
}

// TestCheckOnceFindsDuplicatesAndMissing: the final check counts an item
// refunded twice, an item not refunded, a wrong amount and a refund the
// journal does not name, so a clean matrix means something.
func TestCheckOnceFindsDuplicatesAndMissing(t *testing.T) {
	meta := func(item string) map[string]string {
		return map[string]string{refund.MetaBatch: "b", refund.MetaItem: item, refund.MetaAttempt: "1"}
	}
	charges := []stripesim.Charge{
		{ID: "ch_a", Amount: 1000, Refunds: []stripesim.SeedRefund{{Amount: 400, Metadata: meta("a")}, {Amount: 600, Metadata: meta("a")}}},
		{ID: "ch_b", Amount: 1000},
		{ID: "ch_c", Amount: 1000, Refunds: []stripesim.SeedRefund{{Amount: 999, Metadata: meta("c")}}},
	}
	m := &matrix{opts: options{Log: testWriter{t}}, work: t.TempDir()}
	tl := &tally{Name: "test"}
	r, err := m.newRig(tl, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	r.serve(charges, stripesim.Faults{})
	p := &plan{Batch: "b", index: map[string]int{}}
	for i, id := range []string{"a", "b", "c"} {
		p.Items = append(p.Items, plannedItem{Item: refund.Item{Batch: "b", Item: id, Charge: "ch_" + id}, Want: 1000})
		p.index[id] = i
	}
	j := filepath.Join(r.dir, "j.jsonl")
	if err := os.WriteFile(j, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r.checkOnce(p, j)
	if tl.Dup != 1 || tl.Missing != 1 {
		t.Errorf("checkOnce counted %d duplicates and %d missing, want 1 and 1", tl.Dup, tl.Missing)
	}
	for _, want := range []string{"item c: refund", "is 999", "no journal says it is refunded"} {
		if !strings.Contains(strings.Join(tl.Problems, "\n"), want) {
			t.Errorf("no problem mentions %q: %q", want, tl.Problems)
		}
	}
}

func TestParseKey(t *testing.T) {
	tests := []struct {
		key, batch, item string
		attempt          int
		ok               bool
	}{
		{refund.IdempotencyKey("b", "i1", 1), "b", "i1", 1, true},
		{refund.IdempotencyKey("day-2", "a:b:c", 12), "day-2", "a:b:c", 12, true},
		{"refundkit:cancel:re_1", "", "", 0, false},
		{"other:b:i:1", "", "", 0, false},
		{"refundkit:b:i:x", "", "", 0, false},
	}
	for _, tt := range tests {
		batch, item, attempt, ok := parseKey(tt.key)
		if batch != tt.batch || item != tt.item || attempt != tt.attempt || ok != tt.ok {
			t.Errorf("parseKey(%q) = %q, %q, %d, %v; want %q, %q, %d, %v", tt.key, batch, item, attempt, ok, tt.batch, tt.item, tt.attempt, tt.ok)
		}
	}
}

// TestCheckChargesIsPerCharge: a second refund of a charge by another batch
// is a duplicate unless a plan meant to run on it or the scenario says so;
// each is counted once however often the check runs.
func TestCheckChargesIsPerCharge(t *testing.T) {
	meta := func(batch string) map[string]string {
		return map[string]string{refund.MetaBatch: batch, refund.MetaItem: "i", refund.MetaAttempt: "1"}
	}
	charges := []stripesim.Charge{
		{ID: "ch_a", Amount: 1000, Refunds: []stripesim.SeedRefund{{Amount: 100, Metadata: meta("day-1")}, {Amount: 100, Metadata: meta("day-2")}}},
		{ID: "ch_b", Amount: 1000, Refunds: []stripesim.SeedRefund{{Amount: 100}}},
		{ID: "ch_c", Amount: 1000, Refunds: []stripesim.SeedRefund{{Amount: 100, Status: stripesim.StatusCanceled}}},
	}
	onA := func(batch string) *plan {
		return &plan{Batch: batch, Items: []plannedItem{{Item: refund.Item{Batch: batch, Item: "i", Charge: "ch_a"}}}}
	}
	tests := []struct {
		name  string
		plans []string
		extra bool // the scenario put ch_b's refund there
		dup   int
	}{
		{"one batch meant", []string{"day-1"}, false, 2},
		{"one batch meant, ch_b's refund put there", []string{"day-1"}, true, 1},
		{"both batches meant", []string{"day-1", "day-2", "day-1"}, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &matrix{opts: options{Log: testWriter{t}}, work: t.TempDir()}
			tl := &tally{Name: "test"}
			r, err := m.newRig(tl, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer r.close()
			r.serve(charges, stripesim.Faults{})
			plans := map[string]*plan{}
			for _, b := range tt.plans {
				if plans[b] == nil {
					plans[b] = onA(b)
				}
				r.mean(plans[b])
			}
			if tt.extra {
				r.extra["ch_b"]++
			}
			r.checkPayments()
			r.checkPayments()
			if tl.Dup != tt.dup || tl.ProblemCount != tt.dup {
				t.Errorf("%d duplicates in %d problems, want %d in %d: %q", tl.Dup, tl.ProblemCount, tt.dup, tt.dup, tl.Problems)
			}
		})
	}
}

// TestCheckPaymentsCountsPayPalCaptures: the per-payment check counts a
// capture's live PayPal refunds (COMPLETED, PENDING) beyond what the plans
// meant as duplicates, and not its FAILED or CANCELLED ones.
func TestCheckPaymentsCountsPayPalCaptures(t *testing.T) {
	m := &matrix{opts: options{Log: testWriter{t}}, work: t.TempDir()}
	tl := &tally{Name: "test"}
	r, err := m.newRig(tl, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	captures := []paypalsim.Capture{
		{ID: "CAPA", Amount: 1000, Refunds: []paypalsim.SeedRefund{{Amount: 100}, {Amount: 100, Status: paypalsim.StatusPending}}},
		{ID: "CAPB", Amount: 1000, Refunds: []paypalsim.SeedRefund{{Amount: 100}, {Amount: 100, Status: paypalsim.StatusFailed}, {Amount: 100, Status: paypalsim.StatusCancelled}}},
	}
	r.prov = provider{Name: provPayPal}
	r.serveConfig(stripesim.Config{PayPal: paypalsim.Config{Captures: captures}})
	p := &plan{Batch: "b"}
	for _, id := range []string{"CAPA", "CAPB"} {
		p.Items = append(p.Items, plannedItem{Item: refund.Item{Batch: "b", Item: id, Capture: id}})
	}
	r.mean(p)
	r.checkPayments()
	r.checkPayments()
	if tl.Dup != 1 || tl.ProblemCount != 1 || !strings.Contains(strings.Join(tl.Problems, ""), "capture CAPA: 2 live refunds") {
		t.Errorf("%d duplicates in %d problems, want 1 on CAPA: %q", tl.Dup, tl.ProblemCount, tl.Problems)
	}
}
