package arena

import (
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
