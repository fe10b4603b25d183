package natsjs

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A pull a stopping server ends ("server shutdown", the 409 a SIGTERMed
// nats-server sends its pending pulls) is an outage to ride out, not an
// answer: CI saw a worker halt on it 150 ms into a 10 s lease.
func TestUnreachableKnowsAnEndedPull(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{jetstream.ErrServerShutdown, true},
		{fmt.Errorf("claim: %w", jetstream.ErrServerShutdown), true},
		{jetstream.ErrConsumerLeadershipChanged, true},
		{nats.ErrNoResponders, true},
		{errDropped, true},
		{&jetstream.APIError{Code: 503}, true},
		{&jetstream.APIError{Code: 400}, false},
		{jetstream.ErrConsumerDeleted, false},
		{errors.New("nats: maximum bytes exceeded"), false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("unreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
