package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// TestDocsSynopsisListsEveryFlag holds each binary's page in docs/ to its
// grammar: the synopsis, the first indented block of the page, names every
// flag --help shows, so a flag added to a command cannot be missing there.
func TestDocsSynopsisListsEveryFlag(t *testing.T) {
	for _, c := range []struct {
		name, page string
		grammar    any
	}{
		{"plan", "plan.md", &planArgs{}},
		{"refund", "refund.md", &refundCmd{}},
		{"audit", "audit.md", &auditCmd{}},
		{"journal-merge", "journal-merge.md", &mergeArgs{}},
		{"webhook", "webhook.md", &webhookCmd{}},
		{"adyen-webhook", "adyen-webhook.md", &adyenWebhookCmd{}},
		{"stripe-sim", "stripe-sim.md", &stripeSimCmd{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			text, err := os.ReadFile("../../../docs/" + c.page)
			if err != nil {
				t.Fatal(err)
			}
			syn := synopsisBlock(string(text))
			if !strings.HasPrefix(strings.TrimSpace(syn), c.name+" ") {
				t.Fatalf("docs/%s: the first indented block does not start with %q: %q", c.page, c.name, syn)
			}
			parser, err := kong.New(c.grammar, kong.Vars{"version": "x", "live_help": "x"})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range parser.Model.Flags {
				if f.Hidden || f.Name == "help" || f.Name == "version" {
					continue
				}
				if !strings.Contains(syn, "--"+f.Name+" ") && !strings.Contains(syn, "--"+f.Name+"]") &&
					!(f.Short != 0 && (strings.Contains(syn, "-"+string(f.Short)+" ") || strings.Contains(syn, "-"+string(f.Short)+"]"))) {
					t.Errorf("docs/%s: the synopsis does not name --%s", c.page, f.Name)
				}
			}
		})
	}
}

// synopsisBlock is the first block of lines indented by four spaces.
func synopsisBlock(page string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(page, "\n") {
		switch {
		case strings.HasPrefix(line, "    "):
			in = true
			b.WriteString(line + "\n")
		case in:
			return b.String()
		}
	}
	return b.String()
}
