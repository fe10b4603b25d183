// Command audit tells whether a batch was refunded exactly once.
package main

import (
	"os"

	"github.com/refundkit/refundkit/cmd/internal/cli"
)

func main() { os.Exit(cli.Audit(cli.OSEnv())) }
