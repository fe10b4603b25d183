package arena

import (
	"errors"
	"strings"
	"testing"
)

func TestAddGetRoundTrip(t *testing.T) {
	var a Arena
	in := []string{"", "re_1", strings.Repeat("x", ChunkSize-2), "after a full chunk",
		strings.Repeat("long", ChunkSize/4+1), "é\x00\xff", "last"}
	var refs []Ref
	var want []string
	add := func(s string) {
		refs = append(refs, a.Add(s))
		want = append(want, s)
	}
	for range 3 {
		for _, s := range in {
			add(s)
		}
	}
	for i := range 200_000 { // small strings across several chunk boundaries
		add(strings.Repeat("ab", i%20))
	}
	for i, r := range refs {
		if got := a.Get(r); got != want[i] {
			t.Fatalf("ref %d: got %d bytes %.20q, want %d bytes %.20q", i, len(got), got, len(want[i]), want[i])
		}
	}
	if a.Add("") != 0 {
		t.Fatal("the empty string must be the zero Ref")
	}
}

func TestStringsSurviveLaterAdds(t *testing.T) {
	var a Arena
	s := a.Get(a.Add("kept"))
	for i := 0; i < 100_000; i++ {
		a.Add("filler string number ....................")
	}
	if s != "kept" {
		t.Fatalf("a string from Get changed to %q after more Adds", s)
	}
}

// TestRefBeyondChunks: a chunk a Ref cannot name panics with ErrFull
// rather than wrapping around to chunk 0.
func TestRefBeyondChunks(t *testing.T) {
	if r := refTo(maxChunks-1, 5, 3); r>>40 != maxChunks-1 || r>>20&long != 5 || r&long != 3 {
		t.Fatalf("refTo(last chunk) = %#x", r)
	}
	defer func() {
		if err, _ := recover().(error); !errors.Is(err, ErrFull) {
			t.Fatalf("recovered %v, want ErrFull", err)
		}
	}()
	refTo(maxChunks, 0, 1)
}

func TestSuffix(t *testing.T) {
	var a Arena
	big := strings.Repeat("z", ChunkSize)
	for _, s := range []string{"\x03ch_1", "x", "ab", strings.Repeat("q", ChunkSize-2), big} {
		r := a.Add(s)
		for from := 0; from <= len(s); from++ {
			got, ok := Suffix(r, from)
			if len(s) >= ChunkSize-1 && from < len(s) {
				if ok {
					t.Fatalf("Suffix of a string with a chunk of its own: ok, want false")
				}
				break
			}
			if !ok || a.Get(got) != s[from:] {
				t.Fatalf("Suffix(%.10q, %d) = %.10q, %v; want %.10q", s, from, a.Get(got), ok, s[from:])
			}
			if from > 3 && from < len(s)-3 {
				from = len(s) - 3 // the middle of a long string teaches nothing more
			}
		}
	}
	if _, ok := Suffix(a.Add("abc"), 4); ok {
		t.Fatal("Suffix past the end: ok, want false")
	}
}
