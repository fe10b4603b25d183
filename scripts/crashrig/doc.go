// Package crashrig is the one crash rig of refundkit's tests: it builds the
// real binaries, runs them against the simulator (refund/sim/stripesim: Stripe's
// API and PayPal's), signals them at chosen moments (a refund call held in
// flight, the n-th key reserved), and checks what is left: exactly one live
// refund per planned item, an intent journaled before every call, no
// journal record lost. The crash tests of cmd/internal/cli and the fault matrix of
// scripts/chaos both use it.
//
// It lives under scripts/, beside chaos, because both the cli's tests and
// scripts/chaos import it (Go's internal rule would hide a package under
// cmd/internal from scripts/chaos) and the module's top level holds only
// cmd, journal, refund, scripts and testdata. It is test support, not API.
//
// Journals are read only through package journal, so the rig counts
// records as the journal's own reader sees them (framing lines are not
// records), and decides torn against corrupt as it does.
package crashrig

// Reporter takes the problems a check finds; *testing.T is one.
type Reporter interface {
	Errorf(format string, args ...any)
}
