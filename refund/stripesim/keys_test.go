package stripesim

import (
	"strconv"
	"testing"
	"time"
)

func TestKeyStoreSweepsExpiredKeys(t *testing.T) {
	k := newKeyStore()
	k.sweepEvery = 8 // a small store sweeps like a big one
	t0 := time.Unix(1_700_000_000, 0)
	const ttl = time.Hour
	add := func(prefix string, n int, now time.Time) {
		for i := range n {
			scope := prefix + strconv.Itoa(i)
			_, e, v := k.begin(scope, "POST", "/v1/refunds", "", now, ttl)
			if v != keyNew {
				t.Fatalf("%s: verdict %d", scope, v)
			}
			k.finish(scope, e, 200, nil, "req")
		}
	}
	n := 2 * keyShards * k.sweepEvery
	add("old", n, t0)
	if got := k.size(); got != n {
		t.Fatalf("%d keys held, want %d", got, n)
	}
	add("new", n, t0.Add(ttl))
	// Every shard took at least one sweep after the old keys expired.
	if got := k.size(); got >= 2*n-n/4 {
		t.Errorf("%d keys held after expiry, want most of the %d old ones swept", got, n)
	}
	// A key in flight never expires.
	_, _, v := k.begin("held", "POST", "/v1/refunds", "", t0, ttl)
	if v != keyNew {
		t.Fatal("held: not new")
	}
	if _, _, v := k.begin("held", "POST", "/v1/refunds", "", t0.Add(48*ttl), ttl); v != keyInUse {
		t.Errorf("in-flight key after 48 TTLs: verdict %d, want in use", v)
	}
}
