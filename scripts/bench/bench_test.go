package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{9, 9, 1, 1, 5}, 5},
	} {
		in := slices.Clone(c.in)
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("median reordered its input: %v, was %v", c.in, in)
		}
	}
}

func TestMedianIndex(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want int
	}{
		{[]float64{7}, 0},
		{[]float64{5, 1, 3}, 2},
		{[]float64{4, 1, 3, 2}, 3}, // the lower middle: 2
	} {
		if got := medianIndex(c.in); got != c.want {
			t.Errorf("medianIndex(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5}
	for _, c := range []struct {
		p, want float64
	}{{0, 1}, {50, 5}, {90, 9}, {100, 10}} {
		if got := percentile(xs, c.p); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
}

// TestAlternate checks that the sides take turns going first and that the
// results come back on their own side, paired by round.
func TestAlternate(t *testing.T) {
	var order []string
	n := 0
	side := func(name string) func() (string, error) {
		return func() (string, error) {
			n++
			order = append(order, name)
			return name + string(rune('0'+n)), nil
		}
	}
	cs, bs, err := alternate(3, side("c"), side("b"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"c", "b", "b", "c", "c", "b"}; !slices.Equal(order, want) {
		t.Errorf("ran %v, want %v", order, want)
	}
	if want := []string{"c1", "c4", "c5"}; !slices.Equal(cs, want) {
		t.Errorf("candidate results %v, want %v", cs, want)
	}
	if want := []string{"b2", "b3", "b6"}; !slices.Equal(bs, want) {
		t.Errorf("baseline results %v, want %v", bs, want)
	}
}

func TestAlternateStopsAtError(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	cand := func() (int, error) { calls++; return 1, nil }
	base := func() (int, error) { calls++; return 0, boom }
	if _, _, err := alternate(5, cand, base); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if calls != 2 {
		t.Errorf("%d runs after the first error, want it to stop at 2", calls)
	}
}

func TestParseSummary(t *testing.T) {
	for _, c := range []struct {
		name, stderr string
		want         summary
		wantErr      bool
	}{
		{
			name:   "run",
			stderr: "refund: 20000 items: 20000 refunded, 0 skipped, 0 failed, 0 in_doubt; refunded 998543618 usd; 20000 creates, 0 payment reads, 0 refund lists, 0 refund reads, 0 retried, 0 rate-limited, 0 reconciled, 0 new keys; 40000 journal records in 3374 fsyncs\n",
			want:   summary{Items: 20000, Refunded: 20000, Creates: 20000, Records: 40000, Fsyncs: 3374},
		},
		{
			name:   "restart after a warning",
			stderr: "refund: some warning\nrefund: 1000000 items: 0 refunded, 1000000 skipped, 0 failed, 0 in_doubt; 0 creates, 0 payment reads, 0 refund lists, 0 refund reads, 0 retried, 0 rate-limited, 0 reconciled, 0 new keys; 0 journal records in 0 fsyncs\n",
			want:   summary{Items: 1000000, Skipped: 1000000},
		},
		{
			name:   "reads by kind",
			stderr: "refund: 10 items: 10 refunded, 0 skipped, 0 failed, 0 in_doubt; 10 creates, 2 payment reads, 10 refund lists, 1 refund reads, 0 retried, 0 rate-limited, 0 reconciled, 0 new keys; 20 journal records in 9 fsyncs\n",
			want:   summary{Items: 10, Refunded: 10, Creates: 10, Lists: 13, PaymentReads: 2, RefundLists: 10, RefundReads: 1, Records: 20, Fsyncs: 9},
		},
		{
			name:   "the old core's summary",
			stderr: "refund: 10 items: 10 refunded, 0 skipped, 0 failed, 0 in_doubt; 10 create and 20 list calls, 0 retried, 0 rate-limited, 0 reconciled, 0 new keys; 20 journal records in 9 fsyncs\n",
			want:   summary{Items: 10, Refunded: 10, Creates: 10, Lists: 20, RefundLists: 20, Records: 20, Fsyncs: 9},
		},
		{name: "no summary", stderr: "refund: STRIPE_API_KEY is not set\n", wantErr: true},
		{name: "no fsync figures", stderr: "refund: 1 items: 1 refunded, 0 skipped, 0 failed, 0 in_doubt; 1 creates, 0 payment reads, 0 refund lists, 0 refund reads\n", wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseSummary(c.stderr)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want error: %v", err, c.wantErr)
			}
			if !c.wantErr && got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestSustained(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int, n int64) rateSample { return rateSample{t0.Add(time.Duration(ms) * time.Millisecond), n} }
	for _, c := range []struct {
		name    string
		samples []rateSample
		want    float64
	}{
		{"too few", []rateSample{at(0, 0)}, 0},
		// A slow start and tail around 100/s in the middle.
		{"steady middle", []rateSample{at(0, 0), at(500, 5), at(1000, 20), at(2000, 120), at(3000, 220), at(3500, 240), at(4000, 250)}, 100},
		{"nothing moved", []rateSample{at(0, 0), at(100, 0)}, 0},
	} {
		if got := sustained(c.samples); got != c.want {
			t.Errorf("%s: sustained = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestNum(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 20000: "20,000", 1000005: "1,000,005", -1234: "-1,234"} {
		if got := num(n); got != want {
			t.Errorf("num(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/a.jsonl": "/tmp/a.jsonl",
		"a b":          "'a b'",
		"it's":         `'it'\''s'`,
		"":             "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}

// writeTemp writes text to the file name in dir and returns its path.
func writeTemp(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSameFileAndLineSet(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string { return writeTemp(t, dir, name, text) }
	a := write("a", "x\ny\nz\n")
	for _, c := range []struct {
		name, text          string
		sameFile, sameLines bool
	}{
		{"same", "x\ny\nz\n", true, true},
		{"reordered", "z\nx\ny\n", false, true},
		{"shorter", "x\ny\n", false, false},
		{"longer", "x\ny\nz\nw\n", false, false},
		{"other line", "x\ny\nq\n", false, false},
		{"commit lines", "x\ny\n{\"v\":1,\"type\":\"commit\",\"records\":2,\"crc32c\":\"0a1b2c3d\"}\nz\n", false, true},
	} {
		b := write(c.name, c.text)
		if got, err := sameFile(a, b); err != nil || got != c.sameFile {
			t.Errorf("%s: sameFile = %v, %v; want %v", c.name, got, err, c.sameFile)
		}
		if got, err := sameLineSet(a, b); err != nil || got != c.sameLines {
			t.Errorf("%s: sameLineSet = %v, %v; want %v", c.name, got, err, c.sameLines)
		}
	}
}

func TestDuplicateCharges(t *testing.T) {
	p := filepath.Join(t.TempDir(), "findings.jsonl")
	findings := `{"finding":"duplicate","batch":"B","item":"it2","charge":"ch_2"}
{"finding":"in_doubt","batch":"B","item":"it3","charge":"ch_3"}
{"finding":"duplicate","batch":"B","item":"it1","charge":"ch_1"}
{"finding":"duplicate","batch":"B","item":"i9","payment_intent":"pi_9"}
`
	if err := os.WriteFile(p, []byte(findings), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := duplicateCharges(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ch_1", "ch_2", "pi_9"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if err := os.WriteFile(p, []byte("{not json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := duplicateCharges(p); err == nil {
		t.Error("a line that is not JSON: no error")
	}
}

func TestReadMaxRSS(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       int64
		wantErr    bool
	}{
		{"exit 0", "178188\n", 178188 * 1024, false},
		{"exit 1", "Command exited with non-zero status 1\n236228\n", 236228 * 1024, false},
		{"empty", "", 0, true},
		{"not a number", "Command terminated by signal 9\n", 0, true},
	} {
		p := filepath.Join(t.TempDir(), "time.out")
		if err := os.WriteFile(p, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readMaxRSS(p)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("%s: readMaxRSS = %d, %v; want %d, error %v", c.name, got, err, c.want, c.wantErr)
		}
	}
}
