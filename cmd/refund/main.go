// Command refund issues the refunds of a plan through Stripe exactly once,
// journaling every step. See docs/refund.md and the README for exit codes.
package main

import (
	"os"

	"github.com/refundkit/refundkit/cmd/internal/cli"
)

func main() { os.Exit(cli.Refund(cli.OSEnv())) }
