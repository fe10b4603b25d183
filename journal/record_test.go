package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// oddRecords cover what MarshalLine and the decoders must agree with
// encoding/json on: every field, escapes, non-ASCII, offsets, extremes.
func oddRecords() []*Record {
	plus2 := time.FixedZone("", 2*3600)
	return []*Record{
		intent("b", "i1", 1),
		refunded("b", "i1"),
		failed("b", "i1", 1, 500, false),
		failed("b", "i1", 1, 0, true),
		{V: 1, Type: TypeCanceled, Time: t0, Batch: "b", Item: "i", Refund: "re_x", Amount: 1},
		{V: 1, Type: TypeIntent, Time: t0.In(plus2), Batch: "b", Item: "i", PaymentIntent: "pi_1", Attempt: 7, Key: "k", Reason: "duplicate"},
		{V: 1, Type: TypeIntent, Time: time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC), Batch: "b", Item: "i", Charge: "c", Attempt: 1, Key: "k"},
		{V: 1, Type: TypeIntent, Time: t0, Batch: "b", Item: "i", PSPReference: "8815658961765250", Attempt: 2, Key: "k", Amount: 5, Currency: "eur", Reason: "duplicate"},
		// Every field at once, psp_reference among them in its place.
		{V: 1, Type: TypeFailed, Time: t0, Batch: "b", Item: "i", Charge: "ch_1", PaymentIntent: "pi_1", Capture: "2GG279541U471931P", PSPReference: "QFQTPCQ8HXSKGK82",
			Attempt: 3, Key: "k", Amount: 9, Currency: "eur", Reason: "duplicate", Refund: "r", Status: "failed", Source: "api", HTTPStatus: 422, Code: "c", Message: "m", Final: true},
		{V: 1, Type: TypeIntent, Time: time.Date(2024, 1, 1, 0, 0, 0, 100, time.UTC), Batch: "b", Item: "i", Charge: "c", Attempt: 1, Key: "k", Amount: -3},
		{V: 1, Type: TypeFailed, Time: t0, Batch: "b<&>", Item: "ü\u2028\u2029é", Code: "c", Message: "tab\t nl\n cr\r bs\\ q\" \x00 \x1f \b \f \x7f bad\xff\xfe end", HTTPStatus: -1},
		{V: 1, Type: TypeRefunded, Time: t0, Batch: "b", Item: "i", Refund: "r", Amount: 1<<63 - 1, Attempt: -1 << 40},
		{V: 1, Type: TypeRefunded, Time: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), Batch: "b", Item: "i", Refund: "r", Amount: 999999999999999999},
		{V: 1, Type: TypeRefunded, Time: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), Batch: "b", Item: "i", Refund: "r", Amount: 1000000000000000000},
		{V: 1, Type: TypeFailed, Time: t0, Batch: "b", Item: "i", Code: "c", Final: true},
		{V: 1, Type: "", Time: t0},
	}
}

func TestMarshalLineMatchesEncodingJSON(t *testing.T) {
	for _, r := range oddRecords() {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := MarshalLine([]byte("prefix"), r)
		if err != nil {
			t.Fatalf("MarshalLine(%+v): %v", r, err)
		}
		if string(got) != "prefix"+string(want)+"\n" {
			t.Errorf("MarshalLine:\n got %s\nwant %s", got, want)
		}
	}
}

func TestMarshalLineOutOfRange(t *testing.T) {
	r := intent("b", "i", 1)
	r.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	got, err := MarshalLine([]byte("x"), r)
	if err == nil || string(got) != "x" {
		t.Errorf("MarshalLine(year 10000) = %q, %v; want an error and dst unchanged", got, err)
	}
}

// TestDecodeRoundTrip: what MarshalLine writes, decodeLine reads back, and
// the fast path and encoding/json agree on it.
func TestDecodeRoundTrip(t *testing.T) {
	for _, r := range oddRecords() {
		line, err := MarshalLine(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		line = line[:len(line)-1]
		var viaJSON, viaFast Record
		jerr := decodeJSON(line, &viaJSON)
		fast, _ := decodeFast(line, string(line), &viaFast)
		if fast && !reflect.DeepEqual(viaFast, viaJSON) {
			t.Errorf("fast and encoding/json differ on %s:\nfast %+v\njson %+v", line, viaFast, viaJSON)
		}
		if r.Validate() != nil {
			continue
		}
		if jerr != nil {
			t.Errorf("decodeJSON(%s): %v", line, jerr)
		}
		if !viaJSON.Time.Equal(r.Time) {
			t.Errorf("time %v read back as %v", r.Time, viaJSON.Time)
		}
		viaJSON.Time = r.Time
		if !bytes.Contains(line, []byte(`\ufffd`)) && !reflect.DeepEqual(&viaJSON, r) {
			t.Errorf("read back %+v, want %+v", viaJSON, *r)
		}
	}
}

// TestDecodeFastTakesCanonicalLines guards the speed of loading: the lines
// writers produce must not fall back to encoding/json.
func TestDecodeFastTakesCanonicalLines(t *testing.T) {
	psp := intent("b", "i2", 1)
	psp.Charge, psp.PSPReference = "", "8815658961765250"
	for _, r := range []*Record{intent("b", "i1", 1), refunded("b", "i1"), failed("b", "i", 2, 500, false), psp} {
		r.Message = "plain ascii message"
		line, _ := MarshalLine(nil, r)
		line = line[:len(line)-1]
		var got Record
		if ok, canonical := decodeFast(line, string(line), &got); !ok || !canonical {
			t.Errorf("fast path refused %s", line)
		}
	}
}

func TestValidate(t *testing.T) {
	mod := func(r *Record, f func(*Record)) *Record { f(r); return r }
	tests := []struct {
		name string
		rec  *Record
		want string // "" valid
	}{
		{"intent", intent("b", "i", 1), ""},
		{"intent payment_intent", mod(intent("b", "i", 1), func(r *Record) { r.Charge, r.PaymentIntent = "", "pi_1" }), ""},
		{"refunded", refunded("b", "i"), ""},
		{"failed", failed("b", "i", 1, 402, true), ""},
		{"canceled", &Record{V: 1, Type: TypeCanceled, Time: t0, Batch: "b", Item: "i", Refund: "re_1"}, ""},
		{"version 2", mod(intent("b", "i", 1), func(r *Record) { r.V = 2 }), "version 2"},
		{"no batch", mod(intent("b", "i", 1), func(r *Record) { r.Batch = "" }), "without batch or item"},
		{"no item", mod(refunded("b", "i"), func(r *Record) { r.Item = "" }), "without batch or item"},
		{"no ts", mod(refunded("b", "i"), func(r *Record) { r.Time = time.Time{} }), "without ts"},
		{"intent no key", mod(intent("b", "i", 1), func(r *Record) { r.Key = "" }), "without key or attempt"},
		{"intent attempt 0", mod(intent("b", "i", 1), func(r *Record) { r.Attempt = 0 }), "without key or attempt"},
		{"intent no target", mod(intent("b", "i", 1), func(r *Record) { r.Charge = "" }), "without charge, payment_intent, capture or psp_reference"},
		{"refunded no id", mod(refunded("b", "i"), func(r *Record) { r.Refund = "" }), "refunded record without refund id"},
		{"canceled no id", &Record{V: 1, Type: TypeCanceled, Time: t0, Batch: "b", Item: "i"}, "canceled record without refund id"},
		{"failed no code", mod(failed("b", "i", 1, 402, true), func(r *Record) { r.Code = "" }), "without code"},
		{"unknown type", mod(refunded("b", "i"), func(r *Record) { r.Type = "deleted" }), `unknown record type "deleted"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.rec.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestDecodeLine covers the strict reader: what is torn-like (not JSON),
// what is corrupt, and what is an unknown version.
func TestDecodeLine(t *testing.T) {
	good, _ := MarshalLine(nil, intent("b", "i", 1))
	good = good[:len(good)-1]
	rep := func(old, new string) string { return strings.Replace(string(good), old, new, 1) }
	tests := []struct {
		name    string
		line    string
		syntax  bool   // not JSON: torn when last
		version int    // *VersionError
		want    string // error text, "" valid
	}{
		{"canonical", string(good), false, 0, ""},
		{"spaces", rep(`"v":1,`, ` "v" : 1 , `) + " ", false, 0, ""},
		{"keys reordered", `{"type":"refunded","v":1,"ts":"2024-05-01T12:00:00Z","item":"i","batch":"b","refund":"r"}`, false, 0, ""},
		{"escaped key", rep(`"v":1`, `"\u0076":1`), false, 0, ""},
		{"half", string(good[:len(good)/2]), true, 0, "not JSON"},
		{"nuls", "\x00\x00\x00", true, 0, "not JSON"},
		{"empty", "", true, 0, "not JSON"},
		{"array", `[1,2]`, true, 0, "not a JSON object"},
		{"two objects", string(good) + string(good), true, 0, "not JSON"},
		{"v2", rep(`"v":1`, `"v":2`), false, 2, "version 2"},
		{"v2 with new field", `{"v":2,"type":"x","shiny":true}`, false, 2, "version 2"},
		{"v0", rep(`"v":1`, `"v":0`), false, 0, "version 0"},
		{"no v", rep(`"v":1,`, ``), false, 0, "record without v"},
		{"v null", rep(`"v":1`, `"v":null`), false, 0, "record without v"},
		{"v string", rep(`"v":1`, `"v":"1"`), false, 0, `v "1": want an integer`},
		{"v float", rep(`"v":1`, `"v":1.0`), false, 0, `want an integer`},
		{"unknown field", rep(`"v":1`, `"v":1,"extra":3`), false, 0, `unknown field "extra"`},
		{"key wrong case", rep(`"batch"`, `"Batch"`), false, 0, `unknown field "Batch"`},
		{"duplicate field", rep(`"v":1`, `"v":1,"v":1`), false, 0, `field "v" given twice`},
		{"duplicate other field", rep(`"item":"i"`, `"item":"i","item":"j"`), false, 0, `field "item" given twice`},
		{"wrong type", rep(`"attempt":1`, `"attempt":"1"`), false, 0, "cannot unmarshal string"},
		{"overflow", rep(`"amount":500`, `"amount":99999999999999999999`), false, 0, "cannot unmarshal number"},
		{"bad ts", rep(`2024-05-01`, `2024-02-30`), false, 0, "parsing time"},
		{"invalid record", rep(`"key":"refundkit:b:i:1",`, ``), false, 0, "intent without key or attempt"},
		{"big int fallback", rep(`"amount":500`, `"amount":1000000000000000000`), false, 0, ""},
		{"leading zero", rep(`"amount":500`, `"amount":0500`), true, 0, "not JSON"},
		{"crlf", string(good) + "\r", false, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Record
			line := []byte(tt.line)
			_, err := decodeLine(line, tt.line, &r)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("decodeLine(%s) = %v", tt.line, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("decodeLine(%s) = %v, want %q", tt.line, err, tt.want)
			}
			var se *syntaxError
			if errors.As(err, &se) != tt.syntax {
				t.Errorf("syntax error = %v, want %v", !tt.syntax, tt.syntax)
			}
			var ve *VersionError
			wantVersion := strings.HasPrefix(tt.want, "version ")
			if got := errors.As(err, &ve); got != wantVersion || (got && ve.Version != tt.version) {
				t.Errorf("version error %v, want version %d", err, tt.version)
			}
		})
	}
}

// TestDecodeFastCanonical: the merge copies lines the fast path calls
// canonical, so the flag must be exact both ways on these forms.
func TestDecodeFastCanonical(t *testing.T) {
	good, _ := MarshalLine(nil, intent("b", "i", 1))
	good = good[:len(good)-1]
	rep := func(old, new string) string { return strings.Replace(string(good), old, new, 1) }
	tests := []struct {
		name          string
		line          string
		ok, canonical bool
	}{
		{"as written", string(good), true, true},
		{"zero attempt present", rep(`"attempt":1`, `"attempt":0`), true, false},
		{"minus zero", rep(`"amount":500`, `"amount":-0`), true, false},
		{"empty charge present", rep(`"charge":"ch_i",`, `"charge":"","payment_intent":"pi_1",`), true, false},
		{"final false", rep(`"amount":500`, `"amount":500,"final":false`), true, false},
		{"final true", rep(`"amount":500`, `"amount":500,"final":true`), true, true},
		{"fraction with trailing zero", rep(`.123456789Z`, `.1234Z`), true, true},
		{"fraction with trailing zero", rep(`.123456789Z`, `.12340Z`), true, false},
		{"no fraction", rep(`.123456789Z`, `Z`), true, true},
		{"zone offset", rep(`.123456789Z`, `+02:00`), true, false},
		{"missing ts", rep(`"ts":"2024-05-01T12:00:01.123456789Z",`, ``), true, false},
		{"html characters", rep(`"item":"i"`, `"item":"<i>"`), false, false},
		{"escaped html", rep(`"item":"i"`, `"item":"\u003ci\u003e"`), false, false},
		{"space", rep(`"v":1,`, `"v":1, `), false, false},
		{"key order", rep(`"v":1,"type":"intent"`, `"type":"intent","v":1`), false, false},
	}
	for _, tt := range tests {
		var r Record
		ok, canonical := decodeFast([]byte(tt.line), tt.line, &r)
		if ok != tt.ok || canonical != tt.canonical {
			t.Errorf("%s: decodeFast(%s) = %v, %v; want %v, %v", tt.name, tt.line, ok, canonical, tt.ok, tt.canonical)
		}
	}
}

// TestSpecial8 checks the bit tricks against the table, for every byte at
// every position and for random words.
func TestSpecial8(t *testing.T) {
	word := []byte("abcdefgh")
	for pos := range 8 {
		for b := range 256 {
			w := append([]byte(nil), word...)
			w[pos] = byte(b)
			x := uint64(0)
			for i := 7; i >= 0; i-- {
				x = x<<8 | uint64(w[i])
			}
			if got := special8(x); got != !plainByte[b] {
				t.Fatalf("special8(%q) = %v", w, got)
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		x := rng.Uint64()
		want := false
		for i := range 8 {
			want = want || !plainByte[byte(x>>(8*i))]
		}
		if special8(x) != want {
			t.Fatalf("special8(%#x) = %v, want %v", x, !want, want)
		}
	}
}

// TestParseTimeMatchesTime: the fast timestamp path gives the very value
// time's own parser gives, across the years it accepts.
func TestParseTimeMatchesTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		year, month := rng.IntN(10000), 1+rng.IntN(12)
		day := 1 + rng.IntN(daysIn(month, year))
		frac := []string{"", ".5", ".123456789", ".000000001", ".1200"}[rng.IntN(5)]
		s := fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d%sZ", year, month, day, rng.IntN(24), rng.IntN(60), rng.IntN(60), frac)
		got, ok, _ := parseTime(s)
		var want time.Time
		err := want.UnmarshalJSON([]byte(`"` + s + `"`))
		if !ok || err != nil || got != want {
			t.Fatalf("parseTime(%s) = %v, %v; time says %v, %v", s, got, ok, want, err)
		}
	}
}

// TestPSPReferenceRoundTrip: an Adyen payment's psp_reference, journaled,
// reads back the same through the fast path, encoding/json, and a journal
// reopened, where it binds the item.
func TestPSPReferenceRoundTrip(t *testing.T) {
	r := intent("b", "i", 1)
	r.Charge, r.PSPReference = "", "8815658961765250"
	line, err := MarshalLine(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(line, []byte(`"item":"i","psp_reference":"8815658961765250","attempt":1,`)) {
		t.Errorf("MarshalLine = %s, want psp_reference after item, before attempt", line)
	}
	line = line[:len(line)-1]
	var viaFast, viaJSON Record
	if ok, canonical := decodeFast(line, string(line), &viaFast); !ok || !canonical {
		t.Fatalf("fast path refused %s", line)
	}
	if err := decodeJSON(line, &viaJSON); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]Record{"fast": viaFast, "encoding/json": viaJSON} {
		got.Time = r.Time
		if !reflect.DeepEqual(&got, r) {
			t.Errorf("%s: read back %+v, want %+v", name, got, *r)
		}
	}

	path := t.TempDir() + "/j.jsonl"
	w, _, _, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	other := failed("b", "i", 1, 0, false)
	other.Charge, other.PSPReference = "", "QFQTPCQ8HXSKGK82"
	if err := w.Append(r); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, _, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := st.Lookup("b", "i")
	if want := (ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500, PSPReference: "8815658961765250", Sent: true, SentAmount: 500, SentAt: r.Time.Unix()}); !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("reopened: Lookup = %+v, %v; want %+v", got, ok, want)
	}
	// A record naming another psp_reference: two plans met in the journal.
	w, _, _, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(other); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _, err = Load(path); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Lookup("b", "i"); !got.Rebound || got.PSPReference != "8815658961765250" {
		t.Errorf("after another psp_reference: %+v, want Rebound, bound to the first", got)
	}
}
