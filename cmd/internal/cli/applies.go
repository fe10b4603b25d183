package cli

import "github.com/refundkit/refundkit/refund/checkpoint/postgres"

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
