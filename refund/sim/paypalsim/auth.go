package paypalsim

import (
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/refundkit/refundkit/refund/sim"
)

// tokens are the access tokens issued: whose client id, until when.
type tokens struct {
	mu     sync.Mutex
	m      map[string]tokenInfo
	issued int // since the last sweep of expired tokens
}

type tokenInfo struct {
	clientID string
	expires  time.Time
}

// issue makes a token for clientID that lives ttl from now.
func (t *tokens) issue(clientID string, now time.Time, ttl time.Duration) string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	tok := "A21AAsim" + hex.EncodeToString(b[:])
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.issued++; t.issued >= 1024 { // a long run must not pile them up
		t.issued = 0
		for k, v := range t.m {
			if !now.Before(v.expires) {
				delete(t.m, k)
			}
		}
	}
	t.m[tok] = tokenInfo{clientID: clientID, expires: now.Add(ttl)}
	return tok
}

// tokenVerdict is what a bearer token is worth.
type tokenVerdict int

const (
	tokenValid   tokenVerdict = iota
	tokenMissing              // no bearer token at all
	tokenUnknown              // never issued (or forgotten)
	tokenExpired
)

// check returns the client id of a valid token.
func (t *tokens) check(r *http.Request, now time.Time) (string, tokenVerdict) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return "", tokenMissing
	}
	t.mu.Lock()
	info, ok := t.m[strings.TrimSpace(tok)]
	t.mu.Unlock()
	switch {
	case !ok:
		return "", tokenUnknown
	case !now.Before(info.expires):
		return "", tokenExpired
	}
	return info.clientID, tokenValid
}

// oauthError is OAuth2's error shape (the token endpoint, bad tokens).
type oauthError struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
}

// refuseToken answers 401 to a bad bearer token: invalid_token, or
// AUTHENTICATION_FAILURE without one.
func (s *Server) refuseToken(w http.ResponseWriter, v tokenVerdict, debugID string) {
	s.core.Count.Unauthorized.Add(1)
	var body []byte
	switch v {
	case tokenMissing:
		body = apiErr(http.StatusUnauthorized, nameAuthFailure, msgAuthFailure, debugID, "", "", "").Body
	case tokenExpired:
		s.stats.tokensExpired.Add(1)
		body = sim.MustJSON(oauthError{Error: "invalid_token", Description: "Access Token not found in cache"})
	default:
		body = sim.MustJSON(oauthError{Error: "invalid_token", Description: "Token signature verification failed"})
	}
	writeAnswer(w, http.StatusUnauthorized, body, debugID)
}

// tokenAnswer is the token endpoint's success.
type tokenAnswer struct {
	Scope       string `json:"scope"`
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	AppID       string `json:"app_id"`
	ExpiresIn   int64  `json:"expires_in"`
	Nonce       string `json:"nonce"`
}

// issueToken is POST /v1/oauth2/token: any client id and secret (not kept).
func (s *Server) issueToken(w http.ResponseWriter, r *http.Request, seq uint64, f *sim.Faults) {
	debugID := debugID(seq)
	id, secret, ok := basicAuth(r)
	if !ok || id == "" || secret == "" {
		s.core.Count.Unauthorized.Add(1)
		s.core.Pause(f, seq)
		writeAnswer(w, http.StatusUnauthorized, sim.MustJSON(oauthError{Error: "invalid_client", Description: "Client Authentication failed"}), debugID)
		return
	}
	if s.rateLimited(w, f, seq, debugID) {
		return
	}
	s.core.Pause(f, seq)
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		s.core.Count.InvalidRequests.Add(1)
		writeAnswer(w, http.StatusBadRequest, sim.MustJSON(oauthError{Error: "unsupported_grant_type", Description: "Grant Type is NULL or not client_credentials"}), debugID)
		return
	}
	ttl := cmp.Or(f.PayPalTokenTTL, sim.PayPalTokenTTLDefault)
	now := s.now()
	tok := s.tokens.issue(id, now, ttl)
	s.stats.tokensIssued.Add(1)
	// expires_in rounds up, so a client that trusts it meets no expired token.
	secs := int64((ttl + time.Second - 1) / time.Second)
	writeAnswer(w, http.StatusOK, sim.MustJSON(tokenAnswer{
		Scope: "https://uri.paypal.com/services/payments/refund", AccessToken: tok, TokenType: "Bearer",
		AppID: "APP-SIMULATOR", ExpiresIn: max(1, secs), Nonce: stamp(now) + "sim",
	}), debugID)
}

// basicAuth is BasicAuth that also takes base64 without padding.
func basicAuth(r *http.Request) (id, secret string, ok bool) {
	if id, secret, ok = r.BasicAuth(); ok {
		return id, secret, true
	}
	enc, isBasic := strings.CutPrefix(r.Header.Get("Authorization"), "Basic ")
	if !isBasic {
		return "", "", false
	}
	raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(enc, "="))
	if err != nil {
		return "", "", false
	}
	id, secret, ok = strings.Cut(string(raw), ":")
	return id, secret, ok
}
