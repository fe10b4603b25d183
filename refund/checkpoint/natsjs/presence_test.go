package natsjs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"
)

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

// A second worker under a live worker's name is refused at start: it
// would take the other's claims for its own.
func TestWorkerNameOfALiveWorkerRefused(t *testing.T) {
	srv := reviewServer(t, false)
	url := srv.URL("names")
	first := reviewOpen(t, url, 5*time.Second, "w1")
	if err := first.Load(context.Background(), reviewPlan("B", 1, func(int) string { return "ch_1" })); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), url, Options{Lease: 5 * time.Second, Worker: "w1"}, false)
	var name *refund.WorkerNameError
	if !errors.As(err, &name) {
		t.Fatalf("a second worker named w1: %v, want a *refund.WorkerNameError", err)
	}
	first.Close() // ended cleanly: its name is free at once
	again, err := Open(context.Background(), url, Options{Lease: 5 * time.Second, Worker: "w1"}, false)
	if err != nil {
		t.Fatalf("w1 again after the first ended: %v", err)
	}
	again.Close()
}
