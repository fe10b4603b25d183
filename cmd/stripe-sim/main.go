// Command stripe-sim serves a simulated Stripe refund API on loopback, with
// fault knobs, for tests, demos, chaos runs and benchmarks. See docs/stripe-sim.md.
package main

import (
	"os"

	"github.com/refundkit/refundkit/cmd/internal/cli"
)

func main() { os.Exit(cli.StripeSim(cli.OSEnv())) }
