// Command journal-merge merges refund journals into one.
package main

import (
	"os"

	"github.com/refundkit/refundkit/cmd/internal/cli"
)

func main() { os.Exit(cli.JournalMerge(cli.OSEnv())) }
