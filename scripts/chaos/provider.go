package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// The fake credentials every process gets. They are distinctive so that
// finding one, or its secret part, in any output or file is certain to be
// a leak and not a coincidence.
const (
	// secretKey is Stripe's API key; secretPart its part after the public
	// prefix: a redaction that keeps it would still be a leak.
	secretKey  = "sk_test_chaosLEAKCANARY7d1e9f0b2c4a"
	secretPart = "chaosLEAKCANARY7d1e9f0b2c4a"
	// paypalClientID is public; paypalSecret is PayPal's client secret.
	paypalClientID = "chaos-paypal-client"
	paypalSecret   = "EPpaypalLEAKCANARY3b8e51c0d9f6"
	// adyenAPIKey is Adyen's X-API-Key; adyenHMACKey the HMAC key (hex)
	// that signs its notifications. adyenMerchant is public.
	adyenAPIKey   = "AQEadyenLEAKCANARY5c2f8e1a7b93"
	adyenHMACKey  = "A11CE5C0FFEE0ADDEDBEEF5EED1EA4CA4A4A11CE5C0FFEE0ADDEDBEEF5EED1EA"
	adyenMerchant = "ChaosShop"
)

// secrets are what no output or file may hold, named for the messages.
var secrets = []struct{ name, part string }{
	{"Stripe API key", secretPart},
	{"PayPal client secret", paypalSecret},
	{"Adyen API key", adyenAPIKey},
	{"Adyen HMAC key", adyenHMACKey},
}

// simEnv is the environment of every binary: every API's credentials,
// all pointed at the simulator at base ("" for none).
func simEnv(base string) []string {
	more := []string{"PAYPAL_CLIENT_ID=" + paypalClientID, "PAYPAL_CLIENT_SECRET=" + paypalSecret,
		"ADYEN_API_KEY=" + adyenAPIKey, "ADYEN_MERCHANT_ACCOUNT=" + adyenMerchant, "ADYEN_HMAC_KEY=" + adyenHMACKey}
	if base != "" {
		more = append(more, "PAYPAL_API_BASE="+base, "ADYEN_API_BASE="+base)
	}
	return crashrig.Env(secretKey, base, more...)
}

// provider is the refund API a scenario runs refund against: Stripe (the
// default), PayPal, Adyen, or Stripe's API through the curl commands of
// testdata/exec (`--provider exec`).
type provider struct {
	Name string // "" or "stripe", "paypal", "adyen", "exec"
	// Notes is Adyen's notifications file (the receiver's --out), which
	// refund reads with --notifications.
	Notes string
	// Create and Find are the exec commands (absolute paths); Find "" for
	// none. A scenario may wrap Create in a command of its own.
	Create, Find string
	// Timeout is --exec-timeout ("" for the default).
	Timeout string
}

const (
	provStripe = "stripe"
	provPayPal = "paypal"
	provAdyen  = "adyen"
	provExec   = "exec"
)

// onProvider runs a scenario against the named provider's API; Adyen's
// notifications are kept by bin/adyen-webhook in notes.jsonl.
func onProvider(name string, run func(*rig, sizes)) func(*rig, sizes) {
	return func(r *rig, sz sizes) {
		r.prov = provider{Name: name}
		if name == provAdyen {
			r.prov.Notes = r.path("notes.jsonl")
		}
		run(r, sz)
	}
}

func (p provider) name() string {
	if p.Name == "" {
		return provStripe
	}
	return p.Name
}

// args are refund's flags for the provider; none for Stripe, so its rows
// run refund as they always have.
func (p provider) args() []string {
	switch p.name() {
	case provPayPal:
		return []string{"--provider", provPayPal}
	case provAdyen:
		return []string{"--provider", provAdyen, "--notifications", p.Notes}
	case provExec:
		args := []string{"--provider", provExec, "--exec-create", p.Create}
		if p.Find != "" {
			args = append(args, "--exec-find", p.Find)
		}
		if p.Timeout != "" {
			args = append(args, "--exec-timeout", p.Timeout)
		}
		return args
	}
	return nil
}

// Routes, as the simulator's stats name them: the provider's refund
// creation and its look-up (Stripe's list; PayPal has none, only the read
// of one refund that settles a pending one).
func (p provider) createRoute() string {
	switch p.name() {
	case provPayPal:
		return simtest.PayPalRefund
	case provAdyen:
		return adyensim.RouteNames[0]
	}
	return simtest.Create
}

func (p provider) lookupRoute() string {
	if p.name() == provPayPal {
		return simtest.PayPalGetRefund
	}
	return simtest.List
}

// requests counts the provider's API requests the simulator answered:
// Stripe's creations and look-ups; every request to PayPal's routes
// (tokens, refunds, reads of captures, orders and refunds).
func (p provider) requests(st stripesim.Stats) int64 {
	if p.name() == provAdyen {
		return st.Requests[p.createRoute()]
	}
	if p.name() != provPayPal {
		return st.Requests[p.createRoute()] + st.Requests[p.lookupRoute()]
	}
	var n int64
	for _, route := range paypalsim.RouteNames {
		n += st.Requests[route]
	}
	return n
}

// payment is what the simulator holds for a plan's target: the id its
// refunds name (a charge's, a capture's, a pspReference), its amount and
// what earlier refunds took of it.
type payment struct {
	ID       string
	Amount   int64
	Refunded int64
}

func chargePayment(ch stripesim.Charge) payment {
	p := payment{ID: ch.ID, Amount: ch.Amount}
	for _, s := range ch.Refunds {
		p.Refunded += s.Amount
	}
	return p
}

func capturePayment(cp paypalsim.Capture) payment {
	p := payment{ID: cp.ID, Amount: cp.Amount}
	for _, s := range cp.Refunds {
		p.Refunded += s.Amount
	}
	return p
}

// paymentOf is the simulator's payment id of a plan target (a charge,
// payment intent or capture id), or "" when it holds no such payment.
func (r *rig) paymentOf(target string) string { return r.payments[target].ID }

// newBatch seeds the simulator with n payments of the rig's provider
// (charges, or PayPal captures) under faults, and plans batch over them
// as a support team's export: every 5th a partial refund of half.
func (r *rig) newBatch(n int, faults stripesim.Faults, batch string) *plan {
	return r.newBatchOf(n, faults, batch, false)
}

// newPartialBatch is newBatch with a third of every payment refunded: a
// second refund would succeed, so the API's own "already refunded" check
// hides no duplicate.
func (r *rig) newPartialBatch(n int, faults stripesim.Faults, batch string) *plan {
	return r.newBatchOf(n, faults, batch, true)
}

func (r *rig) newBatchOf(n int, faults stripesim.Faults, batch string, partial bool) *plan {
	if r.prov.name() != provPayPal {
		charges := r.serveCharges(n, faults)
		return r.makePlan("plan.jsonl", batch, r.writeChargesCSV("charges.csv", charges, partial))
	}
	captures := paypalsim.GenerateCaptures(n, int64(r.seed))
	r.serveConfig(stripesim.Config{Faults: faults, PayPal: paypalsim.Config{Captures: captures}})
	return r.makePlan("plan.jsonl", batch, r.writeCaptures("captures.csv", captures, partial))
}

// writeCaptures writes PayPal captures as the CSV a support team would
// export: a capture column, amounts in minor units with their currency.
func (r *rig) writeCaptures(name string, captures []paypalsim.Capture, partial bool) string {
	rows := [][]string{{"capture", "amount", "currency"}}
	for i, cp := range captures {
		rows = append(rows, []string{cp.ID, exportAmount(i, cp.Amount, partial), cp.Currency})
	}
	return r.writeCSV(name, rows)
}

// execCommands are the example commands of testdata/exec, by absolute
// path. They need sh, curl and jq: a machine without them fails the exec
// rows rather than passing rows that checked nothing.
func (m *matrix) execCommands() (create, find string, err error) {
	for _, tool := range []string{"curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", "", fmt.Errorf("the exec rows run testdata/exec, which needs %s: %w", tool, err)
		}
	}
	dir, err := filepath.Abs(m.opts.ExecDir)
	if err != nil {
		return "", "", err
	}
	create, find = filepath.Join(dir, "stripe-create.sh"), filepath.Join(dir, "stripe-find.sh")
	for _, path := range []string{create, find} {
		if _, err := os.Stat(path); err != nil {
			return "", "", fmt.Errorf("%w (-exec-dir names testdata/exec)", err)
		}
	}
	return create, find, nil
}

// paymentWord names the provider's payments in messages.
func (p provider) paymentWord() string {
	switch p.name() {
	case provPayPal:
		return "capture"
	case provAdyen:
		return "payment"
	}
	return "charge"
}
