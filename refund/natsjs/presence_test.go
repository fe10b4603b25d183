package natsjs

import "testing"

func TestAtLeast(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"2.15.2", true}, {"2.11.0", true}, {"2.11.0-RC.1", true}, {"3.0.0", true},
		{"2.10.24", false}, {"2.9.10", false}, {"", false}, {"2", false}, {"x.y.z", false},
	} {
		if got := atLeast(c.v, minServer); got != c.want {
			t.Errorf("atLeast(%q, %q) = %v, want %v", c.v, minServer, got, c.want)
		}
	}
}
