// Command adyen-webhook receives Adyen's notifications: it verifies each
// item's HMAC signature, keeps refund outcomes and other events apart, and
// answers [accepted] once they are durable. See docs/providers.md (Adyen).
package main

import (
	"os"

	"github.com/refundkit/refundkit/cmd/internal/cli"
)

func main() { os.Exit(cli.AdyenWebhook(cli.OSEnv())) }
