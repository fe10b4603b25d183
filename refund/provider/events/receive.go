package events

// The one receiver's core, whatever the provider: a POST read within a
// bound, its signature checked, what it tells read, kept durably and only
// then answered 2xx, which is what ends the provider's retries. Each
// provider supplies how a delivery verifies, reads and is kept; the
// answers, their counting and the store's bound are this file's alone.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Reasons the core refuses a delivery itself, as ReceiverStats names them.
const (
	RefusedTooLarge   = "too_large"   // 413
	RefusedBadRequest = "bad_request" // 400: not a delivery the provider's reader reads
	RefusedMethod     = "method"      // 405
)

// Refusal is a delivery answered Status and counted under Reason; Why is
// for the log.
type Refusal struct {
	Status int
	Reason string
	Why    string
}

func (r *Refusal) Error() string {
	return strconv.Itoa(r.Status) + " " + r.Reason + ": " + r.Why
}

// Refuse is a *Refusal as an error.
func Refuse(status int, reason, why string) error {
	return &Refusal{Status: status, Reason: reason, Why: why}
}

// ReceiverConfig is one provider's side of a Receiver of deliveries kept as K.
type ReceiverConfig[K any] struct {
	// Provider names who retries, in messages: "Stripe".
	Provider string
	// Noun is one delivery in messages: "event".
	Noun string
	// Reasons are the refusals Verify and Read give beyond the core's,
	// counted from zero in the stats.
	Reasons []string
	// Verify checks a delivery's signature: nil, a *Refusal, or another
	// error (answered 500, as a store error: the provider retries).
	Verify func(ctx context.Context, h http.Header, body []byte) error
	// Read reads a verified delivery, valid UTF-8, into what is kept and
	// its name in messages ("event evt_1 (refund.updated)"); an error
	// other than a *Refusal is a 400 bad_request.
	Read func(h http.Header, body []byte) (k K, name string, err error)
	// Keep keeps k durably: false if it was kept already.
	Keep func(ctx context.Context, k K) (bool, error)
	// Reply is the body of a 200 (a JSON object: Content-Type is JSON).
	Reply        string
	MaxBody      int64         // default 1 MiB
	StoreTimeout time.Duration // bounds a Keep (default 30 s)
	Logf         func(format string, args ...any)
}

// Receiver serves POSTs of one provider's deliveries. It is safe for
// concurrent use.
type Receiver[K any] struct {
	cfg ReceiverConfig[K]

	accepted, added, duplicates, storeErrors atomic.Int64
	rejected                                 map[string]*atomic.Int64 // fixed at NewReceiver
}

// ReceiverStats are a Receiver's counters.
type ReceiverStats struct {
	Accepted    int64            `json:"accepted"`   // deliveries answered 200
	Added       int64            `json:"added"`      // deliveries kept
	Duplicates  int64            `json:"duplicates"` // deliveries kept already (the provider's retries)
	Rejected    map[string]int64 `json:"rejected"`
	StoreErrors int64            `json:"store_errors"` // answered 500: the provider retries
}

// NewReceiver checks cfg and fills in its defaults.
func NewReceiver[K any](cfg ReceiverConfig[K]) (*Receiver[K], error) {
	if cfg.Verify == nil || cfg.Read == nil || cfg.Keep == nil {
		return nil, errors.New("receiver: no Verify, Read or Keep")
	}
	cfg.MaxBody = cmp.Or(cfg.MaxBody, 1<<20)
	cfg.StoreTimeout = cmp.Or(cfg.StoreTimeout, 30*time.Second)
	cfg.Reply = cmp.Or(cfg.Reply, `{"received":true}`)
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	r := &Receiver[K]{cfg: cfg, rejected: map[string]*atomic.Int64{}}
	for _, why := range append([]string{RefusedTooLarge, RefusedBadRequest, RefusedMethod}, cfg.Reasons...) {
		r.rejected[why] = new(atomic.Int64)
	}
	return r, nil
}

// Stats returns the counters so far.
func (r *Receiver[K]) Stats() ReceiverStats {
	s := ReceiverStats{Accepted: r.accepted.Load(), Added: r.added.Load(), Duplicates: r.duplicates.Load(),
		StoreErrors: r.storeErrors.Load(), Rejected: map[string]int64{}}
	for why, n := range r.rejected {
		s.Rejected[why] = n.Load()
	}
	return s
}

func (r *Receiver[K]) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		r.refuse(w, req, &Refusal{http.StatusMethodNotAllowed, RefusedMethod, req.Method})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.cfg.MaxBody))
	if err != nil {
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			r.refuse(w, req, &Refusal{http.StatusRequestEntityTooLarge, RefusedTooLarge, fmt.Sprintf("body over %d bytes", r.cfg.MaxBody)})
			return
		}
		r.refuse(w, req, &Refusal{http.StatusBadRequest, RefusedBadRequest, "reading the body: " + err.Error()})
		return
	}
	if err := r.cfg.Verify(req.Context(), req.Header, body); err != nil {
		r.fail(w, req, err, "", "verifying")
		return
	}
	// Kept as a string, byte for byte: JSON keeps valid UTF-8 exactly.
	if !utf8.Valid(body) {
		r.refuse(w, req, &Refusal{http.StatusBadRequest, RefusedBadRequest, "body is not UTF-8"})
		return
	}
	k, name, err := r.cfg.Read(req.Header, body)
	if err != nil {
		if ref := (*Refusal)(nil); !errors.As(err, &ref) {
			err = &Refusal{http.StatusBadRequest, RefusedBadRequest, err.Error()}
		}
		r.fail(w, req, err, "", "")
		return
	}
	// A client that hangs up does not cut a write short (the retry finds
	// it kept); a store that hangs does not hold the request for ever.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), r.cfg.StoreTimeout)
	defer cancel()
	added, err := r.cfg.Keep(ctx, k)
	if err != nil {
		r.fail(w, req, err, name, "keeping")
		return
	}
	if added {
		r.added.Add(1)
	} else {
		r.duplicates.Add(1)
	}
	r.accepted.Add(1)
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, r.cfg.Reply+"\n")
}

// fail answers err: its *Refusal, or a 500 the provider retries.
func (r *Receiver[K]) fail(w http.ResponseWriter, req *http.Request, err error, name, doing string) {
	if ref := (*Refusal)(nil); errors.As(err, &ref) {
		r.refuse(w, req, ref)
		return
	}
	r.storeErrors.Add(1)
	what := cmp.Or(name, r.cfg.Noun)
	r.cfg.Logf("%s: answered 500 (%s retries): %s %s: %v", req.RemoteAddr, r.cfg.Provider, doing, what, err)
	http.Error(w, r.cfg.Noun+" not kept", http.StatusInternalServerError)
}

func (r *Receiver[K]) refuse(w http.ResponseWriter, req *http.Request, ref *Refusal) {
	n := r.rejected[ref.Reason]
	if n == nil { // a reason the provider did not declare: counted, never lost
		n = r.rejected[RefusedBadRequest]
	}
	n.Add(1)
	r.cfg.Logf("%s: refused (%d %s): %s", req.RemoteAddr, ref.Status, ref.Reason, ref.Why)
	http.Error(w, http.StatusText(ref.Status), ref.Status)
}
