package cli

import (
	"github.com/alecthomas/kong"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
)

// givenFlags are the flags a command line gave, defaults aside, so that a
// command refuses a flag that does not apply to what it was asked to do
// instead of ignoring it: `--lease 5s` with a journal file leases nothing,
// and an operator who typed it believes otherwise. Embedded in a command's
// grammar (tagged kong:"-"), it is filled by parse.
type givenFlags struct {
	names map[string]bool
}

// recordGiven keeps the flags kong parsed from the command line (not
// those it filled from a default).
func (g *givenFlags) recordGiven(ctx *kong.Context) {
	g.names = map[string]bool{}
	for _, p := range ctx.Path {
		if p.Flag != nil && !p.Resolved {
			g.names[p.Flag.Name] = true
		}
	}
}

// applies says when flags mean something: what says when, in words after
// "is for" ("a PostgreSQL checkpoint (--journal postgres://...)").
type applies struct {
	flags []string
	when  bool
	what  string
}

// refuseInapplicable is the usage error naming the first flag given whose
// rule does not hold; nil when every flag given applies.
func (g *givenFlags) refuseInapplicable(rules ...applies) error {
	for _, r := range rules {
		if r.when {
			continue
		}
		for _, f := range r.flags {
			if g.names[f] {
				return &usageError{"--" + f + " is for " + r.what}
			}
		}
	}
	return nil
}

// The providers' own flags, the same rule in refund and audit.
func (f *providerFlags) applies() []applies {
	return []applies{
		{[]string{"exec-create", "exec-find", "exec-timeout", "exec-key-ttl"}, f.Provider == providerExec, "--provider exec"},
		{[]string{"api-base"}, f.Provider == providerStripe, "--provider stripe"},
		{[]string{"paypal-api-base"}, f.Provider == providerPayPal, "--provider paypal"},
		{[]string{"notifications"}, f.Provider == providerAdyen, "--provider adyen"},
		{[]string{"live"}, f.Provider != providerExec, "--provider stripe, paypal or adyen: an exec command chooses its own API and account"},
	}
}

// inapplicable refuses refund's flags that do not apply to this run.
func (c *refundCmd) inapplicable() error {
	rules := append(c.providerFlags.applies(),
		applies{[]string{"lease", "worker"}, isShared(c.Journal), "a shared checkpoint (--journal postgres://... or nats://...): a journal file is held by one run, with no claims to lease or name"},
		applies{[]string{"shard"}, !isShared(c.Journal), "a journal file: the workers of a shared checkpoint claim items instead"},
		applies{[]string{"share"}, c.Provider != providerExec, "a provider whose limits refundkit knows (stripe, paypal, adyen): pace an exec command's API with --rate"},
		applies{[]string{"metrics-every"}, c.MetricsFile != "", "--metrics-file"},
		applies{[]string{"offline"}, c.DryRun, "--dry-run: a run that sends refunds looks each item up at the provider first"},
		applies{[]string{"resend-after-500"}, c.Provider == providerStripe, "--provider stripe, which may still complete a call it answered 500: no other provider's item is ever sent under a new key after its 500 (Adyen's is sent again under its same key while Adyen keeps it, without this flag)"},
	)
	return c.refuseInapplicable(rules...)
}

// inapplicable refuses audit's flags that do not apply to this audit.
func (c *auditCmd) inapplicable() error {
	pf := providerFlags{Provider: c.Provider}
	if c.Stripe {
		pf.Provider = providerStripe
	}
	asked := pf.Provider != ""
	pg := false
	for _, j := range c.Journals {
		pg = pg || postgres.IsURL(j)
	}
	notesFor := "--provider adyen"
	if !asked {
		notesFor += ": add --provider adyen, and ADYEN_HMAC_KEY to the environment to verify them (audit --provider adyen --notifications FILE --plan PLAN JOURNAL)"
	}
	rules := []applies{
		{[]string{"exec-create"}, false, "refund: audit never creates a refund (with --provider exec it runs --exec-find)"},
		{[]string{"exec-find", "exec-timeout", "exec-key-ttl"}, pf.Provider == providerExec, "--provider exec"},
		{[]string{"api-base"}, pf.Provider == providerStripe, "--provider stripe"},
		{[]string{"paypal-api-base"}, pf.Provider == providerPayPal, "--provider paypal"},
		{[]string{"notifications"}, pf.Provider == providerAdyen, notesFor},
		{[]string{"live"}, asked && pf.Provider != providerExec, "--provider stripe, paypal or adyen: without one audit reads no account"},
		{[]string{"concurrency", "rate"}, asked, "--provider: without one audit asks no API"},
		{[]string{"batch"}, pg, "a PostgreSQL checkpoint (a postgres://... JOURNAL): a journal file's batches are all audited"},
	}
	return c.refuseInapplicable(rules...)
}
