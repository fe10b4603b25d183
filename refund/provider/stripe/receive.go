package stripe

// Stripe's side of the one receiver (cmd webhook): each event verified
// under the endpoint's signing secrets and kept before it is answered 2xx,
// which is what ends Stripe's retries.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// EventsPath is the path Stripe's events are served at by default.
const EventsPath = "/stripe/events"

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	Secrets      []string      // the endpoint's signing secrets: several while one is rolled
	Tolerance    time.Duration // how old a signature may be (default Tolerance, 300 s)
	Events       *EventsFile   // opened for writing
	MaxBody      int64         // default 1 MiB
	StoreTimeout time.Duration // bounds an Add (default 30 s)
	Now          func() time.Time
	Logf         func(format string, args ...any)
}

// Receiver serves POSTs of Stripe's events. It is safe for concurrent use.
type Receiver struct {
	cfg ReceiverConfig

	accepted, added, duplicates, storeErrors atomic.Int64
	rejected                                 map[string]*atomic.Int64
}

// Reasons an event is refused, as ReceiverStats names them.
const (
	RefusedSignature  = "signature"   // 401: no Stripe-Signature, none of its v1= verifies, or too old (a replay)
	RefusedTooLarge   = "too_large"   // 413
	RefusedBadRequest = "bad_request" // 400: signed, but not an event refundkit reads
	RefusedMethod     = "method"      // 405
)

// ReceiverStats are a Receiver's counters.
type ReceiverStats struct {
	Accepted    int64            `json:"accepted"`   // events answered 200
	Added       int64            `json:"added"`      // events kept
	Duplicates  int64            `json:"duplicates"` // events kept already (Stripe's retries)
	Rejected    map[string]int64 `json:"rejected"`
	StoreErrors int64            `json:"store_errors"` // answered 500: Stripe retries
}

func NewReceiver(cfg ReceiverConfig) (*Receiver, error) {
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("no signing secret")
	}
	if cfg.Events == nil {
		return nil, errors.New("no events file")
	}
	cfg.Tolerance = cmp.Or(cfg.Tolerance, Tolerance)
	cfg.MaxBody = cmp.Or(cfg.MaxBody, 1<<20)
	cfg.StoreTimeout = cmp.Or(cfg.StoreTimeout, 30*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	r := &Receiver{cfg: cfg, rejected: map[string]*atomic.Int64{}}
	for _, why := range []string{RefusedSignature, RefusedTooLarge, RefusedBadRequest, RefusedMethod} {
		r.rejected[why] = new(atomic.Int64)
	}
	return r, nil
}

func (r *Receiver) Stats() ReceiverStats {
	s := ReceiverStats{Accepted: r.accepted.Load(), Added: r.added.Load(), Duplicates: r.duplicates.Load(),
		StoreErrors: r.storeErrors.Load(), Rejected: map[string]int64{}}
	for why, n := range r.rejected {
		s.Rejected[why] = n.Load()
	}
	return s
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		r.refuse(w, req, http.StatusMethodNotAllowed, RefusedMethod, req.Method)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.cfg.MaxBody))
	if err != nil {
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			r.refuse(w, req, http.StatusRequestEntityTooLarge, RefusedTooLarge, fmt.Sprintf("body over %d bytes", r.cfg.MaxBody))
			return
		}
		r.refuse(w, req, http.StatusBadRequest, RefusedBadRequest, "reading the body: "+err.Error())
		return
	}
	sig := req.Header.Get(SignatureHeader)
	if err := VerifyEvent(body, sig, r.cfg.Secrets, r.cfg.Tolerance); err != nil {
		r.refuse(w, req, http.StatusUnauthorized, RefusedSignature, "Stripe-Signature: "+err.Error())
		return
	}
	// Kept as a string, byte for byte: JSON keeps valid UTF-8 exactly.
	if !utf8.Valid(body) {
		r.refuse(w, req, http.StatusBadRequest, RefusedBadRequest, "body is not UTF-8")
		return
	}
	ev, err := ReadEvent(body)
	if err != nil {
		r.refuse(w, req, http.StatusBadRequest, RefusedBadRequest, err.Error())
		return
	}
	// A client that hangs up does not cut a write short (the retry finds
	// it kept); a store that hangs does not hold the request for ever.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), r.cfg.StoreTimeout)
	defer cancel()
	added, err := r.cfg.Events.Add(ctx, Kept{V: KeptVersion, Received: r.cfg.Now().UTC(), Signature: sig, Payload: string(body)})
	if err != nil {
		r.storeErrors.Add(1)
		r.cfg.Logf("%s: answered 500 (Stripe retries): keeping event %s (%s): %v", req.RemoteAddr, ev.ID, ev.Type, err)
		http.Error(w, "event not kept", http.StatusInternalServerError)
		return
	}
	if added {
		r.added.Add(1)
	} else {
		r.duplicates.Add(1)
	}
	r.accepted.Add(1)
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"received":true}`+"\n")
}

func (r *Receiver) refuse(w http.ResponseWriter, req *http.Request, status int, reason, why string) {
	r.rejected[reason].Add(1)
	r.cfg.Logf("%s: refused (%d %s): %s", req.RemoteAddr, status, reason, why)
	http.Error(w, http.StatusText(status), status)
}
