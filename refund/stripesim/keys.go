package stripesim

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// keyShards spreads idempotency keys over independent locks so concurrent
// requests with different keys never wait for each other.
const keyShards = 64

// keyStore is Stripe's idempotency layer: per API key and idempotency key,
// the first completed answer, replayed to every later request with the key.
type keyStore struct {
	shards     [keyShards]keyShard
	sweepEvery int // new keys a shard takes between sweeps of expired keys
}

type keyShard struct {
	mu      sync.Mutex
	m       map[string]*keyEntry
	inserts int // since the last sweep of expired keys
}

// sweepEvery is how many new keys a shard takes between sweeps of its
// expired keys: keys never asked for again must not pile up in a long
// benchmark, and a sweep's cost is spread over that many inserts.
const sweepEvery = 1024

// keyEntry is one idempotency key: its first request, and once that request
// finished, the answer saved for it.
type keyEntry struct {
	method, path string
	params       string // canonical form encoding of the first request
	created      time.Time
	done         bool
	status       int
	body         []byte
	requestID    string
}

// verdict is what the idempotency layer decides for an incoming request.
type verdict int

const (
	keyNew              verdict = iota // first use: the request runs and holds the key
	keyReplay                          // a saved answer exists: replay it
	keyInUse                           // the first request is still running: 409
	keyEndpointMismatch                // saved for another method or path: 400
	keyParamsMismatch                  // saved for other parameters: 400
)

func newKeyStore() *keyStore {
	k := &keyStore{sweepEvery: sweepEvery}
	for i := range k.shards {
		k.shards[i].m = make(map[string]*keyEntry)
	}
	return k
}

func (k *keyStore) shard(scope string) *keyShard {
	// FNV-1a: cheap, and the keys carry enough entropy in their tails.
	h := uint32(2166136261)
	for i := 0; i < len(scope); i++ {
		h ^= uint32(scope[i])
		h *= 16777619
	}
	return &k.shards[h%keyShards]
}

// begin looks the key up. For keyNew it returns the new in-flight entry the
// caller must finish or abandon; for keyReplay and the mismatches, a copy of
// the saved entry. ttl > 0 makes completed keys older than ttl unknown.
func (k *keyStore) begin(scope, method, path, params string, now time.Time, ttl time.Duration) (keyEntry, *keyEntry, verdict) {
	sh := k.shard(scope)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.m[scope]; ok {
		switch {
		case e.done && ttl > 0 && now.Sub(e.created) >= ttl:
			// Expired: forgotten, as Stripe forgets keys after 24 hours.
		case e.method != method || e.path != path:
			return *e, nil, keyEndpointMismatch
		case e.params != params:
			return *e, nil, keyParamsMismatch
		case !e.done:
			return keyEntry{}, nil, keyInUse
		default:
			return *e, nil, keyReplay
		}
	}
	if ttl > 0 {
		if sh.inserts++; sh.inserts >= k.sweepEvery {
			sh.inserts = 0
			for sc, old := range sh.m {
				if old.done && now.Sub(old.created) >= ttl {
					delete(sh.m, sc)
				}
			}
		}
	}
	e := &keyEntry{method: method, path: path, params: params, created: now}
	sh.m[scope] = e
	return keyEntry{}, e, keyNew
}

// finish saves the answer of the request that holds e. If the key was
// forgotten meanwhile the answer is simply not reachable any more.
func (k *keyStore) finish(scope string, e *keyEntry, status int, body []byte, requestID string) {
	sh := k.shard(scope)
	sh.mu.Lock()
	e.status, e.body, e.requestID, e.done = status, body, requestID, true
	sh.mu.Unlock()
}

// abandon releases a key whose request ended without an answer worth saving
// (a validation error): Stripe lets the key be used again.
func (k *keyStore) abandon(scope string, e *keyEntry) {
	sh := k.shard(scope)
	sh.mu.Lock()
	if sh.m[scope] == e {
		delete(sh.m, scope)
	}
	sh.mu.Unlock()
}

// forget drops every completed key, as their 24-hour expiry would. Keys
// whose first request is still running stay: no real expiry can overtake a
// request in flight, and dropping them would let a retry run it twice.
func (k *keyStore) forget() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		for scope, e := range sh.m {
			if e.done {
				delete(sh.m, scope)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// size is how many keys are held, in flight or completed.
func (k *keyStore) size() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// servePost runs a POST through Stripe's idempotency layer into fn: a
// request with a key holds it while it runs, and an answer of the endpoint
// is saved under it for every later request with the key.
func (s *Server) servePost(w http.ResponseWriter, r *http.Request, rt route, fn endpoint, c apiCall, apiKey, reqID string) {
	f, seq := c.f, c.seq
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if len(key) > 255 {
		s.pause(f, seq)
		a := invalid("", "", "Idempotency keys can be at most 255 characters long.")
		s.countInvalid(a)
		writeAnswer(w, a.status, a.body, reqID, "", false)
		return
	}
	var scope string
	var held *keyEntry
	if key != "" {
		scope = apiKey + "\x00" + key
		saved, e, v := s.keys.begin(scope, r.Method, r.URL.Path, r.Form.Encode(), s.now(), s.keyTTL)
		if v != keyNew {
			s.pause(f, seq)
			s.writeKeyVerdict(w, v, saved, key, r.URL.Path, reqID)
			return
		}
		held = e
	}
	c.key = key
	// The key is held from here: latency and the hook keep it in flight.
	// run may outlive the handler, so it takes nothing from r.
	run := func() answer {
		s.pause(f, seq)
		a := fn(c)
		s.countInvalid(a)
		if held != nil {
			if a.save {
				s.keys.finish(scope, held, a.status, a.body, reqID)
			} else {
				s.keys.abandon(scope, held)
			}
		}
		return a
	}
	if rt == routeCreateRefund && f.GatewayTimeoutShare > 0 && draw(s.seed, seq, knobGatewayTimeout) < f.GatewayTimeoutShare {
		// The gateway gives up at once; the request goes on behind it.
		s.stats.gatewayTimeouts.Add(1)
		background := s.goBackground(func() { run() })
		writeGatewayAnswer(w, f.gatewayStatus(http.StatusGatewayTimeout), f.GatewayStripeBody)
		if !background { // the server is closing: finish it here
			run()
		}
		return
	}
	a := run()
	switch {
	case a.drop:
		s.stats.dropped.Add(1)
		dropConnection(w)
	case a.gateway:
		s.stats.gatewayErrorsAfter.Add(1)
		writeGatewayAnswer(w, f.gatewayStatus(http.StatusBadGateway), f.GatewayStripeBody)
	default:
		writeAnswer(w, a.status, a.body, reqID, key, false)
	}
}

// writeKeyVerdict answers a request whose key is not new: the saved answer
// replayed, or Stripe's 409 or 400.
func (s *Server) writeKeyVerdict(w http.ResponseWriter, v verdict, saved keyEntry, key, path, reqID string) {
	switch v {
	case keyReplay:
		s.stats.replayed.Add(1)
		writeAnswer(w, saved.status, saved.body, saved.requestID, key, true)
	case keyInUse:
		s.stats.keyInUse.Add(1)
		body := errorBody(apiError{Type: typeIdempotency, Code: "idempotency_key_in_use",
			Message: fmt.Sprintf("There is currently another in-progress request using this Idempotency Key (that probably means you submitted twice, and the other request is still going through): '%s'. Please try again later.", key)})
		writeAnswer(w, http.StatusConflict, body, reqID, key, false)
	case keyEndpointMismatch:
		s.stats.keyMismatch.Add(1)
		body := errorBody(apiError{Type: typeIdempotency,
			Message: fmt.Sprintf("Keys for idempotent requests can only be used for the same endpoint they were first used for ('%s' vs '%s'). Try using a key other than '%s' if you meant to execute a different request.", saved.path, path, key)})
		writeAnswer(w, http.StatusBadRequest, body, reqID, key, false)
	case keyParamsMismatch:
		s.stats.keyMismatch.Add(1)
		body := errorBody(apiError{Type: typeIdempotency,
			Message: fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", key)})
		writeAnswer(w, http.StatusBadRequest, body, reqID, key, false)
	}
}
