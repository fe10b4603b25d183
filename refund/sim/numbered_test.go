package sim

import "testing"

func TestNumbered(t *testing.T) {
	l := Numbered[string]{Prefix: "re_", Width: 3}
	for i := 1; i <= 1001; i++ {
		l.Add(func(n int, id string) string { return id })
	}
	for _, tt := range []struct {
		id   string
		want bool
	}{
		{"re_001", true}, {"re_999", true}, {"re_1000", true}, {"re_1001", true},
		{"re_1002", false}, {"re_000", false}, {"re_01", false}, {"re_0001", false}, {"re_", false},
		{"re_-01", false}, {"re_+01", false}, {"xx_001", false}, {"re_01a", false},
	} {
		got, ok := l.Get(tt.id)
		if ok != tt.want || ok && got != tt.id {
			t.Errorf("Get(%q) = %q, %v; want found %v", tt.id, got, ok, tt.want)
		}
	}
	if all := l.All(); len(all) != 1001 || all[0] != "re_001" {
		t.Errorf("All: %d, first %q", len(all), all[0])
	}
}
