// Package webhook is refundkit's receiver of Adyen's notifications, as an
// http.Handler: it verifies every item of a request, keeps them in a
// notes.Store, and answers [accepted] (which ends Adyen's retries) only
// once the store made them durable. A request with an item that does not
// verify is refused whole; refusals are counted by reason (Stats).
package webhook

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

// DefaultMaxBody is the largest request body taken by default.
const DefaultMaxBody = 1 << 20

// Config configures a Handler.
type Config struct {
	Keys               [][]byte // the HMAC keys (wire.ParseHMACKeys): every item is signed under one (two while a key is rotated)
	Path               string   // the one path served (default DefaultPath)
	MerchantAccount    string   // if set, the only merchantAccountCode taken
	Username, Password string   // if set, the basic auth Adyen sends (both or neither)
	// Refunds keeps refund events (wire.RefundEvent), Others the rest.
	Refunds, Others notes.Store
	MaxBody         int64                            // default DefaultMaxBody
	StoreTimeout    time.Duration                    // bounds a request's Adds (default 30s; Adyen waits 10s)
	Now             func() time.Time                 // the clock of Received (default time.Now)
	Logf            func(format string, args ...any) // messages for people (default: none)
}

// DefaultPath is the path served when Config.Path is empty.
const DefaultPath = "/adyen/notifications"

// Handler serves Adyen's notifications. It is safe for concurrent use.
type Handler struct {
	cfg        Config
	user, pass [sha256.Size]byte
	basic      bool
	rejected   map[string]*atomic.Int64 // by reason, each there from New on

	accepted, added, duplicates, others, othersDuplicates, storeErrors, notFound atomic.Int64
}

// Reasons a request is refused, as Stats names them (another path is a
// 404, a store that failed a 500).
const (
	ReasonAuth       = "auth"        // 401: basic auth wrong or missing
	ReasonHMAC       = "hmac"        // 401: an item's hmacSignature wrong or missing
	ReasonTooLarge   = "too_large"   // 413: over MaxBody
	ReasonBadRequest = "bad_request" // 400: not a notification request
	ReasonMerchant   = "merchant"    // 422: another merchant account
	ReasonMethod     = "method"      // 405: not a POST
)

// Stats are a Handler's counters.
type Stats struct {
	Accepted         int64            `json:"accepted"`          // requests answered [accepted]
	Added            int64            `json:"added"`             // refund events kept
	Duplicates       int64            `json:"duplicates"`        // refund events kept already (retries)
	Others           int64            `json:"others"`            // other events kept
	OthersDuplicates int64            `json:"others_duplicates"` // other events kept already
	Rejected         map[string]int64 `json:"rejected"`          // refused requests by reason
	StoreErrors      int64            `json:"store_errors"`      // requests answered 500
	NotFound         int64            `json:"not_found"`         // requests for another path
}

func New(cfg Config) (*Handler, error) {
	if wire.NoKey(cfg.Keys) {
		return nil, errors.New("no HMAC key")
	}
	if cfg.Refunds == nil || cfg.Others == nil {
		return nil, errors.New("no store")
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("basic auth needs both a username and a password")
	}
	cfg.Path = cmp.Or(cfg.Path, DefaultPath)
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	h := &Handler{cfg: cfg, basic: cfg.Username != "", rejected: make(map[string]*atomic.Int64)}
	for _, r := range []string{ReasonAuth, ReasonHMAC, ReasonTooLarge, ReasonBadRequest, ReasonMerchant, ReasonMethod} {
		h.rejected[r] = new(atomic.Int64)
	}
	h.user, h.pass = sha256.Sum256([]byte(cfg.Username)), sha256.Sum256([]byte(cfg.Password))
	return h, nil
}

// Stats reads the counters.
func (h *Handler) Stats() Stats {
	s := Stats{
		Accepted: h.accepted.Load(), Added: h.added.Load(), Duplicates: h.duplicates.Load(),
		Others: h.others.Load(), OthersDuplicates: h.othersDuplicates.Load(),
		StoreErrors: h.storeErrors.Load(), NotFound: h.notFound.Load(),
		Rejected: make(map[string]int64, len(h.rejected)),
	}
	for r, n := range h.rejected {
		s.Rejected[r] = n.Load()
	}
	return s
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != h.cfg.Path {
		h.notFound.Add(1)
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.refuse(w, r, http.StatusMethodNotAllowed, ReasonMethod, r.Method)
		return
	}
	if h.basic && !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="adyen-webhook", charset="UTF-8"`)
		h.refuse(w, r, http.StatusUnauthorized, ReasonAuth, "basic auth wrong or missing")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.refuse(w, r, http.StatusRequestEntityTooLarge, ReasonTooLarge, fmt.Sprintf("body over %d bytes", h.cfg.MaxBody))
			return
		}
		h.refuse(w, r, http.StatusBadRequest, ReasonBadRequest, "reading the body: "+err.Error())
		return
	}
	var req wire.Request
	if err := json.Unmarshal(body, &req); err != nil {
		h.refuse(w, r, http.StatusBadRequest, ReasonBadRequest, "not JSON of a notification request: "+err.Error())
		return
	}
	if len(req.NotificationItems) == 0 {
		h.refuse(w, r, http.StatusBadRequest, ReasonBadRequest, "no notificationItems")
		return
	}
	if req.Live != "true" && req.Live != "false" {
		h.refuse(w, r, http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf("live %q: want \"true\" or \"false\"", req.Live))
		return
	}
	// Every item is checked before any is kept.
	for i := range req.NotificationItems {
		it := &req.NotificationItems[i].NotificationRequestItem
		if !wire.Verify(it, h.cfg.Keys...) {
			what := "wrong"
			if it.AdditionalData[wire.SignatureField] == "" {
				what = "missing"
			}
			h.refuse(w, r, http.StatusUnauthorized, ReasonHMAC, fmt.Sprintf("item %d (%s pspReference %q): hmacSignature %s", i+1, it.EventCode, it.PSPReference, what))
			return
		}
	}
	for i := range req.NotificationItems {
		it := &req.NotificationItems[i].NotificationRequestItem
		if h.cfg.MerchantAccount != "" && it.MerchantAccountCode != h.cfg.MerchantAccount {
			h.refuse(w, r, http.StatusUnprocessableEntity, ReasonMerchant, fmt.Sprintf("item %d (%s pspReference %q): merchant account %q, this receiver takes %q only", i+1, it.EventCode, it.PSPReference, it.MerchantAccountCode, h.cfg.MerchantAccount))
			return
		}
	}
	// A client that hangs up does not cut a write short (the retry finds
	// it kept); a store that hangs does not hold the request for ever.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.StoreTimeout)
	defer cancel()
	received := h.cfg.Now().UTC()
	var added, dups, others, othersDups int64
	for i := range req.NotificationItems {
		n := wire.Notification{V: wire.Version, Received: received, Live: req.Live == "true", Item: req.NotificationItems[i].NotificationRequestItem}
		store, refund := h.cfg.Others, wire.RefundEvent(n.Item.EventCode)
		if refund {
			store = h.cfg.Refunds
		}
		ok, err := store.Add(ctx, n)
		if err != nil {
			h.storeErrors.Add(1)
			h.cfg.Logf("%s: answered 500, not [accepted] (Adyen retries): storing %s pspReference %q: %v", r.RemoteAddr, n.Item.EventCode, n.Item.PSPReference, err)
			http.Error(w, "notification not stored", http.StatusInternalServerError)
			return
		}
		switch {
		case refund && ok:
			added++
		case refund:
			dups++
		case ok:
			others++
		default:
			othersDups++
		}
	}
	h.added.Add(added)
	h.duplicates.Add(dups)
	h.others.Add(others)
	h.othersDuplicates.Add(othersDups)
	h.accepted.Add(1)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, wire.Accepted)
}

// authorized compares digests of the basic auth in constant time, so that
// not even the lengths tell.
func (h *Handler) authorized(r *http.Request) bool {
	u, p, ok := r.BasicAuth()
	uh, ph := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
	match := subtle.ConstantTimeCompare(uh[:], h.user[:]) & subtle.ConstantTimeCompare(ph[:], h.pass[:])
	return ok && match == 1
}

func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, status int, reason, why string) {
	h.rejected[reason].Add(1)
	h.cfg.Logf("%s: refused (%d %s): %s", r.RemoteAddr, status, reason, why)
	http.Error(w, http.StatusText(status), status)
}
