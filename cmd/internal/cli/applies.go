package cli

import "github.com/refundkit/refundkit/refund/checkpoint/postgres"

// inapplicable refuses refund's flags that do not apply to this run.
func (c *refundCmd) inapplicable() error {
	rules := append([]applies{{[]string{"exec-create"}, c.Provider == providerExec, "--provider exec"}}, providerRules(c.Provider, "--provider adyen",
		applies{[]string{"live"}, c.Provider != providerExec, "--provider stripe, paypal or adyen: an exec command chooses its own API and account"})...)
	rules = append(rules,
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
	rules := append([]applies{{[]string{"exec-create"}, false, "refund: audit never creates a refund (with --provider exec it runs --exec-find)"}}, providerRules(pf.Provider, notesFor,
		applies{[]string{"live"}, asked && pf.Provider != providerExec, "--provider stripe, paypal or adyen: without one audit reads no account"})...)
	rules = append(rules,
		applies{[]string{"concurrency", "rate"}, asked, "--provider: without one audit asks no API"},
		applies{[]string{"batch"}, pg, "a PostgreSQL checkpoint (a postgres://... JOURNAL): a journal file's batches are all audited"})
	return c.refuseInapplicable(rules...)
}
