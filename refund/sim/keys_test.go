package sim

import (
	"strconv"
	"testing"
	"time"
)

func TestKeyStoreSweepsExpiredKeys(t *testing.T) {
	k := NewKeyStore()
	k.sweepEvery = 8 // a small store sweeps like a big one
	t0 := time.Unix(1_700_000_000, 0)
	const ttl = time.Hour
	add := func(prefix string, n int, now time.Time) {
		for i := range n {
			scope := prefix + strconv.Itoa(i)
			_, e, v := k.Begin(scope, "POST", "/v1/refunds", "", now, ttl)
			if v != KeyNew {
				t.Fatalf("%s: verdict %d", scope, v)
			}
			k.Finish(scope, e, 200, nil, "req", "")
		}
	}
	n := 2 * keyShards * k.sweepEvery
	add("old", n, t0)
	if got := k.Size(); got != n {
		t.Fatalf("%d keys held, want %d", got, n)
	}
	add("new", n, t0.Add(ttl))
	// Every shard took at least one sweep after the old keys expired.
	if got := k.Size(); got >= 2*n-n/4 {
		t.Errorf("%d keys held after expiry, want most of the %d old ones swept", got, n)
	}
	// A key in flight never expires.
	_, _, v := k.Begin("held", "POST", "/v1/refunds", "", t0, ttl)
	if v != KeyNew {
		t.Fatal("held: not new")
	}
	if _, _, v := k.Begin("held", "POST", "/v1/refunds", "", t0.Add(48*ttl), ttl); v != KeyInUse {
		t.Errorf("in-flight key after 48 TTLs: verdict %d, want in use", v)
	}
}

// TestKeyStoreEachKeyItsOwnTTL: Stripe's keys (24 hours) and PayPal's
// request ids (45 days) share a store; a sweep drops a key by its own ttl,
// never by that of the key whose insert ran the sweep.
func TestKeyStoreEachKeyItsOwnTTL(t *testing.T) {
	k := NewKeyStore()
	k.sweepEvery = 1 // every insert sweeps its shard
	t0 := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		scope string
		ttl   time.Duration
	}{{"long", 45 * 24 * time.Hour}, {"kept", 0}, {"short", time.Hour}} {
		_, e, _ := k.Begin(c.scope, "POST", "/p", "", t0, c.ttl)
		k.Finish(c.scope, e, 201, nil, "req", "ref-"+c.scope)
	}
	later := t0.Add(48 * time.Hour)
	for i := range 4 * keyShards { // sweeps in every shard
		k.Begin("x"+strconv.Itoa(i), "POST", "/p", "", later, time.Hour)
	}
	for scope, want := range map[string]Verdict{"long": KeyReplay, "kept": KeyReplay, "short": KeyNew} {
		saved, _, v := k.Begin(scope, "POST", "/p", "", later, time.Hour)
		if v != want {
			t.Errorf("%s after 48h: verdict %d, want %d", scope, v, want)
		}
		if v == KeyReplay && (saved.Ref != "ref-"+scope || saved.Status != 201) {
			t.Errorf("%s: saved %+v", scope, saved)
		}
	}
}
