package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func lines(recs ...*Record) []byte {
	var b []byte
	for _, r := range recs {
		var err error
		if b, err = MarshalLine(b, r); err != nil {
			panic(err)
		}
	}
	return b
}

// tailCases are journals that end in a crash's leftovers or in damage: the
// records before the damage, and where it is.
var tailCases = []struct {
	name    string
	data    []byte
	records int
	torn    int64  // offset of a torn tail, -1 if none
	corrupt string // a *CorruptError naming this, "" if none
	version int    // a *VersionError at line records+1, 0 if none
}{
	{"clean", lines(intent("b", "1", 1), refunded("b", "1")), 2, -1, "", 0},
	{"empty", nil, 0, -1, "", 0},
	{"no newline", trim(lines(intent("b", "1", 1), refunded("b", "1"))), 1, int64(len(lines(intent("b", "1", 1)))), "", 0},
	{"half a record", cut(lines(intent("b", "1", 1), refunded("b", "1")), 30), 1, int64(len(lines(intent("b", "1", 1)))), "", 0},
	{"garbage last line", append(lines(intent("b", "1", 1)), "garbage\n"...), 1, int64(len(lines(intent("b", "1", 1)))), "", 0},
	{"nuls after last record", append(lines(intent("b", "1", 1)), make([]byte, 4096)...), 1, int64(len(lines(intent("b", "1", 1)))), "", 0},
	{"nuls with newline", append(lines(intent("b", "1", 1)), "\x00\x00\x00\n"...), 1, int64(len(lines(intent("b", "1", 1)))), "", 0},
	{"only nuls", make([]byte, 512), 0, 0, "", 0},
	{"empty last line", append(lines(intent("b", "1", 1)), '\n'), 1, int64(len(lines(intent("b", "1", 1)))), "", 0},
	// A group commit writes many records at once; a crash keeps a prefix.
	{"torn in a group write", cut(lines(intent("b", "1", 1), intent("b", "2", 1), intent("b", "3", 1), intent("b", "4", 1)), 50),
		3, int64(len(lines(intent("b", "1", 1), intent("b", "2", 1), intent("b", "3", 1)))), "", 0},
	{"garbage mid-file", append(append(lines(intent("b", "1", 1)), "garbage\n"...), lines(refunded("b", "1"))...), 1, -1, "j.jsonl:2: corrupt record: not JSON", 0},
	{"nuls mid-file", append(append(lines(intent("b", "1", 1)), "\x00\x00\n"...), lines(refunded("b", "1"))...), 1, -1, "j.jsonl:2: corrupt record: not JSON", 0},
	{"empty line mid-file", append(append(lines(intent("b", "1", 1)), '\n'), lines(refunded("b", "1"))...), 1, -1, "j.jsonl:2: corrupt record: not JSON", 0},
	{"torn record mid-file", append(append(cut(lines(intent("b", "1", 1)), 10), '\n'), lines(refunded("b", "1"))...), 0, -1, "j.jsonl:1: corrupt record: not JSON", 0},
	// Not a crash: a record appended after a torn one must not be cut.
	{"record after torn one", append(cut(lines(intent("b", "1", 1)), 10), lines(refunded("b", "1"))...), 0, -1, "j.jsonl:1: corrupt record: a complete record starts at byte 141", 0},
	{"unknown field last", append(lines(intent("b", "1", 1)), `{"v":1,"type":"refunded","ts":"2024-05-01T12:00:00Z","batch":"b","item":"1","refund":"r","x":1}`+"\n"...), 1, -1, `j.jsonl:2: corrupt record: unknown field "x"`, 0},
	{"invalid record mid-file", append(append(lines(intent("b", "1", 1)), `{"v":1,"type":"refunded","ts":"2024-05-01T12:00:00Z","batch":"b","item":"1"}`+"\n"...), lines(refunded("b", "2"))...), 1, -1, "j.jsonl:2: corrupt record: refunded record without refund id", 0},
	{"v2 last line", append(lines(intent("b", "1", 1)), `{"v":2,"type":"refunded","new":true}`+"\n"...), 1, -1, "", 2},
	{"v2 mid-file", append(append(lines(intent("b", "1", 1)), `{"v":2}`+"\n"...), lines(refunded("b", "1"))...), 1, -1, "", 2},
	{"long line mid-file", append(append(lines(intent("b", "1", 1)), bytes.Repeat([]byte("x"), maxLine+10)...), '\n', '{', '}', '\n'), 1, -1, "j.jsonl:2: corrupt record: line longer than", 0},
	{"long torn line", append(lines(intent("b", "1", 1)), bytes.Repeat([]byte("x"), maxLine+10)...), 1, int64(len(lines(intent("b", "1", 1)))), "", 0},
}

// commitOf is a group commit of recs: their lines and its commit line.
func commitOf(recs ...*Record) []byte {
	b := lines(recs...)
	return AppendCommit(b, b, len(recs))
}

func trim(b []byte) []byte       { return b[:len(b)-1] }
func cut(b []byte, n int) []byte { return b[:len(b)-n] }

func TestScannerTails(t *testing.T) {
	for _, tt := range tailCases {
		t.Run(tt.name, func(t *testing.T) {
			sc := NewScanner(bytes.NewReader(tt.data), "j.jsonl")
			n := 0
			for sc.Scan() {
				n++
				if sc.Line() != n {
					t.Errorf("Line = %d, want %d", sc.Line(), n)
				}
			}
			if n != tt.records {
				t.Errorf("read %d records, want %d", n, tt.records)
			}
			checkEnd(t, tt.data, sc.Err(), sc.Torn(), tt.torn, tt.corrupt, tt.version, n)
		})
	}
}

// checkEnd checks how a read of data ended.
func checkEnd(t *testing.T, data []byte, err error, torn *Torn, wantTorn int64, corrupt string, version, records int) {
	t.Helper()
	switch {
	case corrupt != "":
		var ce *CorruptError
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), corrupt) {
			t.Errorf("err = %v, want a *CorruptError %q", err, corrupt)
		}
	case version != 0:
		var ve *VersionError
		if !errors.As(err, &ve) || ve.Version != version {
			t.Errorf("err = %v, want *VersionError %d", err, version)
		}
		if want := "j.jsonl:" + strconv.Itoa(records+1) + ": record version"; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("err = %v, want it to start %q", err, want)
		}
	case err != nil:
		t.Errorf("err = %v", err)
	}
	if wantTorn < 0 {
		if torn != nil {
			t.Errorf("torn = %v, want none", torn)
		}
		return
	}
	if torn == nil {
		t.Fatalf("no torn tail, want one at %d", wantTorn)
	}
	if torn.Offset != wantTorn || torn.Offset+int64(torn.Bytes) != int64(len(data)) || torn.Line != records+1 || torn.Path != "j.jsonl" {
		t.Errorf("torn = %+v, want offset %d, %d bytes, line %d", torn, wantTorn, int64(len(data))-wantTorn, records+1)
	}
}

// TestLoadTails: Load reports the same as the Scanner and changes nothing.
func TestLoadTails(t *testing.T) {
	for _, tt := range tailCases {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j.jsonl")
			if err := os.WriteFile(path, tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Chdir(filepath.Dir(path))
			st, torn, err := Load("j.jsonl")
			checkEnd(t, tt.data, err, torn, tt.torn, tt.corrupt, tt.version, tt.records)
			if err == nil && st == nil {
				t.Error("nil state without error")
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, tt.data) {
				t.Error("Load changed the file")
			}
		})
	}
}

// TestOpenRepairsTornTail: Open saves the torn bytes aside, cuts them off,
// and the next record starts on its own line.
func TestOpenRepairsTornTail(t *testing.T) {
	for _, tt := range tailCases {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			if err := os.WriteFile("j.jsonl", tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			w, st, torn, err := Open("j.jsonl", Options{})
			checkEnd(t, tt.data, err, torn, tt.torn, tt.corrupt, tt.version, tt.records)
			if err != nil {
				if w != nil {
					t.Error("Writer returned with an error")
				}
				if after, _ := os.ReadFile("j.jsonl"); !bytes.Equal(after, tt.data) {
					t.Error("Open changed a journal it refused")
				}
				return
			}
			keep := int64(len(tt.data))
			if torn != nil {
				keep = torn.Offset
				saved, err := os.ReadFile(torn.SavedTo)
				if err != nil || !bytes.Equal(saved, tt.data[keep:]) {
					t.Errorf("saved torn bytes %q, %v; want %q", saved, err, tt.data[keep:])
				}
				if info, err := os.Stat(torn.SavedTo); err != nil || info.Mode().Perm() != 0o600 {
					t.Errorf("torn copy mode %v, %v", info.Mode(), err)
				}
				if !strings.HasPrefix(torn.SavedTo, "j.jsonl.torn-") || !strings.Contains(torn.String(), torn.SavedTo) {
					t.Errorf("torn = %s", torn)
				}
			}
			if err := w.Append(refunded("b", "new")); err != nil {
				t.Fatal(err)
			}
			w.Close()
			after, _ := os.ReadFile("j.jsonl")
			// The old journal is framed by an empty commit before the first.
			want := append(append(append([]byte(nil), tt.data[:keep]...), emptyCommit...), commitOf(refunded("b", "new"))...)
			if !bytes.Equal(after, want) {
				t.Errorf("journal after repair and append:\n%q\nwant\n%q", after, want)
			}
			st2, torn2, err := Load("j.jsonl")
			if err != nil || torn2 != nil || st2.Len() != st.Len()+1 {
				t.Errorf("reload: %v, %v, %d items, want %d", err, torn2, st2.Len(), st.Len()+1)
			}
		})
	}
}

func TestScannerRecordsAreFresh(t *testing.T) {
	data := lines(intent("b", "1", 1), refunded("b", "1"))
	sc := NewScanner(bytes.NewReader(data), "j")
	var got []*Record
	for sc.Scan() {
		got = append(got, sc.Record())
	}
	if want := []*Record{intent("b", "1", 1), refunded("b", "1")}; !reflect.DeepEqual(got, want) {
		t.Errorf("records %+v, want %+v", got, want)
	}
	if sc.Offset() != int64(len(lines(intent("b", "1", 1)))) {
		t.Errorf("Offset = %d", sc.Offset())
	}
}

// FuzzScanner: whatever the bytes, reading never panics, ends in exactly
// one way, and the fast decoder agrees with encoding/json on every line.
func FuzzScanner(f *testing.F) {
	for _, tt := range tailCases {
		if len(tt.data) < 4096 {
			f.Add(tt.data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := NewScanner(bytes.NewReader(data), "fuzz")
		for sc.Scan() {
			if err := sc.Record().Validate(); err != nil {
				t.Fatalf("line %d: Scan returned an invalid record: %v", sc.Line(), err)
			}
		}
		if sc.Err() != nil && sc.Torn() != nil {
			t.Fatalf("both an error %v and a torn tail %v", sc.Err(), sc.Torn())
		}
		if tn := sc.Torn(); tn != nil && tn.Offset+int64(tn.Bytes) != int64(len(data)) {
			t.Fatalf("torn tail %+v does not reach the end (%d bytes)", tn, len(data))
		}
		if sc.Err() == nil && sc.Torn() == nil && len(data) > 0 && data[len(data)-1] != '\n' {
			t.Fatalf("input without final newline read cleanly")
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			checkFastMatchesJSON(t, line)
		}
		checkLoadMatchesScanner(t, data)
	})
}

func checkFastMatchesJSON(t *testing.T, line []byte) {
	var fast, slow Record
	ok, canonical := decodeFast(line, string(line), &fast)
	if !ok {
		return
	}
	if canonical {
		if again, err := MarshalLine(nil, &fast); err != nil || string(again) != string(line)+"\n" {
			t.Fatalf("%q taken as canonical, but MarshalLine writes %q, %v", line, again, err)
		}
	}
	fastErr := fast.Validate()
	slowErr := decodeJSON(line, &slow)
	if (fastErr == nil) != (slowErr == nil) || (fastErr != nil && fastErr.Error() != slowErr.Error()) {
		t.Fatalf("%q: fast path says %v, encoding/json says %v", line, fastErr, slowErr)
	}
	if slowErr == nil && !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q:\nfast path %#v\nencoding/json %#v", line, fast, slow)
	}
}

// checkLoadMatchesScanner: the parallel loader ends like the Scanner and
// builds the state the Scanner's records make.
func checkLoadMatchesScanner(t *testing.T, data []byte) {
	t.Helper()
	for _, chunk := range []int{1 << 20, 256} {
		checkLoadChunkedMatchesScanner(t, data, chunk)
	}
}

func checkLoadChunkedMatchesScanner(t *testing.T, data []byte, chunk int) {
	t.Helper()
	want := NewState()
	sc := NewScanner(bytes.NewReader(data), "j")
	for sc.Scan() {
		want.Apply(sc.Record())
	}
	l, err := load(bytes.NewReader(data), "j", ReadOptions{BlockSize: chunk})
	got, torn := l.state, l.torn
	if fmt.Sprint(err) != fmt.Sprint(sc.Err()) || !reflect.DeepEqual(torn, sc.Torn()) {
		t.Fatalf("load (%d-byte chunks) ended with %v, %v; the Scanner with %v, %v", chunk, err, torn, sc.Err(), sc.Torn())
	}
	if err != nil {
		return
	}
	if got.Len() != want.Len() {
		t.Fatalf("load found %d items, the Scanner %d", got.Len(), want.Len())
	}
	want.Each(func(batch, item string, st ItemState) {
		if g, ok := got.Lookup(batch, item); !ok || !reflect.DeepEqual(g, st) {
			t.Fatalf("load has %q %q as %+v, the Scanner as %+v", batch, item, g, st)
		}
	})
}

// TestLoadMatchesScannerAcrossChunks runs journals of many load chunks,
// with damage at chunk boundaries, through both readers.
func TestLoadMatchesScannerAcrossChunks(t *testing.T) {
	const chunk = 1024
	var big []byte
	for i := 0; len(big) < 8*chunk; i++ {
		big = append(big, lines(intent("b", strconv.Itoa(i), 1+i%3))...)
		if i%2 == 0 {
			big = append(big, lines(refunded("b", strconv.Itoa(i)))...)
		}
	}
	nl := bytes.IndexByte(big[chunk:], '\n') + chunk + 1
	cases := map[string][]byte{
		"clean":               big,
		"torn":                big[:len(big)-7],
		"nuls at the end":     append(append([]byte(nil), big...), make([]byte, 3000)...),
		"corrupt at boundary": append(append(append([]byte(nil), big[:chunk]...), "}\n"...), big[chunk:]...),
		"corrupt after":       append(append(append([]byte(nil), big[:nl]...), "x\n"...), big[nl:]...),
		"long line":           append(append(append([]byte(nil), big[:nl]...), lines(failed("b", "x", 1, 500, false))...), big[nl:]...),
		"slow path lines":     bytes.ReplaceAll(big, []byte(`"v":1,`), []byte(`"v": 1, `)),
	}
	long := bytes.Replace(cases["long line"], []byte(`the \"card\"`), bytes.Repeat([]byte("y"), 3*chunk), 1)
	if len(long) <= len(cases["long line"]) {
		t.Fatal("no line longer than a chunk")
	}
	cases["long line"] = long
	for name, data := range cases {
		t.Run(name, func(t *testing.T) { checkLoadChunkedMatchesScanner(t, data, chunk) })
	}
}
