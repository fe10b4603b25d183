package sim

import (
	"strings"
	"sync"
	"time"
)

// keyShards spreads the keys over locks: different keys never wait.
const keyShards = 64

// KeyStore is the idempotency layer of every API: per scope (credentials
// and key), the first request and, once done, its answer, each kept for
// its own time to live.
type KeyStore struct {
	shards     [keyShards]keyShard
	sweepEvery int // new keys a shard takes between sweeps of expired keys
}

type keyShard struct {
	mu       sync.Mutex
	m        map[string]*KeyEntry
	inserts  int  // since the last sweep of expired keys
	expiring bool // a key with a ttl was ever held: sweeps are worth it
}

// sweepEvery is how many new keys a shard takes between sweeps of its
// expired ones, so a long benchmark does not pile them up.
const sweepEvery = 1024

// KeyEntry is one key: its first request and, once done, its answer.
type KeyEntry struct {
	Method, Path string
	params       string // canonical encoding of the first request
	created      time.Time
	ttl          time.Duration // 0: kept until Forget
	done         bool
	// The saved answer and its request id; Ref, what it made, for an API
	// whose replay renders that thing's latest status.
	Status    int
	Body      []byte
	RequestID string
	Ref       string
}

// Verdict is what the idempotency layer decides for an incoming request.
type Verdict int

const (
	KeyNew              Verdict = iota // first use: the request runs and holds the key
	KeyReplay                          // a saved answer exists: replay it
	KeyInUse                           // the first request is still running: 409
	KeyEndpointMismatch                // saved for another method or path: 400
	KeyParamsMismatch                  // saved for other parameters: 400
)

// NewKeyStore makes an empty store.
func NewKeyStore() *KeyStore {
	k := &KeyStore{sweepEvery: sweepEvery}
	for i := range k.shards {
		k.shards[i].m = make(map[string]*KeyEntry)
	}
	return k
}

func (k *KeyStore) shard(scope string) *keyShard {
	// FNV-1a: cheap, and the keys carry enough entropy in their tails.
	h := uint32(2166136261)
	for i := 0; i < len(scope); i++ {
		h ^= uint32(scope[i])
		h *= 16777619
	}
	return &k.shards[h%keyShards]
}

// Begin looks the key up: for KeyNew, the new entry the caller must finish
// or abandon; otherwise a copy of the saved one. ttl > 0 forgets a done key
// ttl after its first request.
func (k *KeyStore) Begin(scope, method, path, params string, now time.Time, ttl time.Duration) (KeyEntry, *KeyEntry, Verdict) {
	sh := k.shard(scope)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.m[scope]; ok {
		switch {
		case e.expired(now):
			// Expired: forgotten, as Stripe forgets keys after 24 hours.
		case e.Method != method || e.Path != path:
			return *e, nil, KeyEndpointMismatch
		case e.params != params:
			return *e, nil, KeyParamsMismatch
		case !e.done:
			return KeyEntry{}, nil, KeyInUse
		default:
			return *e, nil, KeyReplay
		}
	}
	sh.expiring = sh.expiring || ttl > 0
	if sh.inserts++; sh.expiring && sh.inserts >= k.sweepEvery {
		sh.inserts = 0
		for sc, old := range sh.m {
			if old.expired(now) {
				delete(sh.m, sc)
			}
		}
	}
	e := &KeyEntry{Method: method, Path: path, params: params, created: now, ttl: ttl}
	sh.m[scope] = e
	return KeyEntry{}, e, KeyNew
}

// Done reports whether the key's first request has finished.
func (e KeyEntry) Done() bool { return e.done }

// expired reports whether a completed key has outlived its ttl.
func (e *KeyEntry) expired(now time.Time) bool {
	return e.done && e.ttl > 0 && now.Sub(e.created) >= e.ttl
}

// Finish saves the answer of the request that holds e.
func (k *KeyStore) Finish(scope string, e *KeyEntry, status int, body []byte, requestID, ref string) {
	sh := k.shard(scope)
	sh.mu.Lock()
	e.Status, e.Body, e.RequestID, e.Ref, e.done = status, body, requestID, ref, true
	sh.mu.Unlock()
}

// Abandon frees a key whose request ended unsaved (a validation error).
func (k *KeyStore) Abandon(scope string, e *KeyEntry) {
	sh := k.shard(scope)
	sh.mu.Lock()
	if sh.m[scope] == e {
		delete(sh.m, scope)
	}
	sh.mu.Unlock()
}

// Forget drops every completed key, as expiry would; keys in flight stay,
// or a retry could run their request twice.
func (k *KeyStore) Forget() int { return k.ForgetScope("") }

// ForgetScope is Forget for the scopes that start with prefix.
func (k *KeyStore) ForgetScope(prefix string) int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		for scope, e := range sh.m {
			if e.done && strings.HasPrefix(scope, prefix) {
				delete(sh.m, scope)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Size is how many keys are held, in flight or completed.
func (k *KeyStore) Size() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
