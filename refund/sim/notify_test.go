package sim

import (
	"testing"
	"time"
)

// TestNotifierBackoff: doubling from Backoff, capped, never overflowing.
func TestNotifierBackoff(t *testing.T) {
	n := &Notifier{cfg: NotifierConfig{Backoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond << 6}}
	for attempts, want := range map[int]time.Duration{1: 50 * time.Millisecond, 2: 100 * time.Millisecond, 7: 3200 * time.Millisecond,
		8: 3200 * time.Millisecond, 1000: 3200 * time.Millisecond} {
		if got := n.backoff(attempts); got != want {
			t.Errorf("backoff(%d) = %v, want %v", attempts, got, want)
		}
	}
}

func TestCheckLoopbackURL(t *testing.T) {
	for u, ok := range map[string]bool{"http://127.0.0.1:1/x": true, "https://localhost/x": true, "http://[::1]:2/": true,
		"http://example.com/": false, "ftp://127.0.0.1/": false, "http://10.0.0.1/": false} {
		if err := CheckLoopbackURL("events url", "events", u); (err == nil) != ok {
			t.Errorf("%s: %v", u, err)
		}
	}
}
