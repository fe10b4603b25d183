// Command refund issues the refunds of a plan through Stripe exactly once,
// journaling every step. See the README for usage and exit codes.
package main

import (
	"os"

	"github.com/refundkit/refundkit/cmd/internal/cli"
)

func main() { os.Exit(cli.Refund(cli.OSEnv())) }
