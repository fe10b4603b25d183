// Command plan turns a list of charges into the plan items of one batch.
package main

import (
	"os"

	"github.com/refundkit/refundkit/cmd/internal/cli"
)

func main() { os.Exit(cli.Plan(cli.OSEnv())) }
