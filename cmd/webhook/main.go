// Command webhook receives the providers' webhooks: Adyen's notifications
// and Stripe's events, each verified as its provider signs it and kept
// durably before it is answered 2xx. See docs/webhook.md.
package main

import (
	"os"

	"github.com/refundkit/refundkit/cmd/internal/cli"
)

func main() { os.Exit(cli.Webhook(cli.OSEnv())) }
