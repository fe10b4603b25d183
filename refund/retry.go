package refund

// Repeating a call with the same key, and the backoff between tries: the
// one copy, which the engine and audit share.

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"
)

// Backoff spaces retries of one call: a random delay in [d/2, d] where d
// doubles from Base up to Max. The jitter keeps workers from retrying in
// step. A provider says its own (Facts.Backoff).
type Backoff struct{ Base, Max time.Duration }

// Delay is the wait before retry n (0 for the first retry).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Max
	if n < 30 && b.Base<<n < b.Max {
		d = b.Base << n
	}
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Sleep waits the delay before retry n; false when ctx ended first.
func (b Backoff) Sleep(ctx context.Context, n int) bool { return sleep(ctx, b.Delay(n)) }

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// retryable decides whether a failed call is repeated with the same key, and
// sleeps the backoff if so.
func (e *engine) retryable(ctx context.Context, err error, try int, it *Item, attempt int, what string) bool {
	f := Classify(err)
	if f.Class != ClassRetry {
		e.unanswered.Store(0)
		return false
	}
	if f.RateLimited {
		e.limited.Add(1)
	}
	if f.Status == 0 {
		if n := e.unanswered.Add(1); n >= int64(e.cfg.MaxUnanswered) {
			name := strings.ToLower(e.name)
			if gw, ok := strings.CutPrefix(f.Code, "gateway_"); ok {
				e.halt(&HaltError{Err: fmt.Errorf("%s did not answer %d calls in a row: a gateway in front of it answered %s instead", name, n, gw)})
			} else {
				e.halt(&HaltError{Err: fmt.Errorf("%s did not answer %d calls in a row: %s", name, n, f.Message)})
			}
			return false
		}
	} else {
		e.unanswered.Store(0)
	}
	e.retries.Add(1)
	d := e.cfg.Backoff.Delay(try)
	msg := "retrying with the same key"
	if what != "create" {
		msg = "retrying the " + what
	}
	e.logItem(slog.LevelDebug, msg, it, attempt, "status", f.Status, "code", f.Code, "after", d)
	if e.cfg.OnRetry != nil {
		e.cfg.OnRetry(1)
		defer e.cfg.OnRetry(-1)
	}
	return sleep(ctx, d)
}

// retryGet decides whether a read the provider answered as indeterminate
// is repeated: a read changes nothing, so it is safe, a few times.
func (e *engine) retryGet(ctx context.Context, try int) bool {
	if try >= 5 {
		return false
	}
	e.retries.Add(1)
	return e.cfg.Backoff.Sleep(ctx, try)
}
