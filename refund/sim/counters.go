package sim

import "sync/atomic"

// Counters count what both APIs did, updated without locks: a concept of
// both (a refund made, a 429, a replay) has one counter, whichever API it
// happened on. Each API counts its requests by route itself.
type Counters struct {
	RefundsCreated     atomic.Int64 // refunds made by the API (not seeded)
	RefundsRefused     atomic.Int64 // creations refused for the payment's state
	RateLimited        atomic.Int64 // 429s, drawn or from the rate limits
	ErrorsBefore       atomic.Int64 // injected 500s before the commit
	ErrorsAfter        atomic.Int64 // injected 500s after the commit
	Dropped            atomic.Int64 // connections closed after a commit
	Replayed           atomic.Int64 // answers given again from a key
	KeyInUse           atomic.Int64 // 409s: the key's first request still runs
	Unauthorized       atomic.Int64 // 401s
	InvalidRequests    atomic.Int64 // requests refused for their parameters
	GatewayTimeouts    atomic.Int64 // gateway answers while the request went on
	GatewayErrorsAfter atomic.Int64 // gateway answers after the commit
}
