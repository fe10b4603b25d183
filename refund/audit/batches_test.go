package audit_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund/audit"
)

// TestAuditWithAnotherBatchsPlan: a plan whose batches the journals share
// none of is one *BatchMismatchError naming both sides, and no finding;
// one batch in common, and the items are audited one by one.
func TestAuditWithAnotherBatchsPlan(t *testing.T) {
	const journal = `{"v":1,"type":"intent","ts":"2024-05-01T12:00:00Z","batch":"K","item":"i1","charge":"ch_1","attempt":1,"key":"refundkit:K:i1:1","amount":500}
{"v":1,"type":"refunded","ts":"2024-05-01T12:00:01Z","batch":"K","item":"i1","charge":"ch_1","attempt":1,"key":"refundkit:K:i1:1","refund":"re_1","amount":500,"currency":"usd","source":"api"}
{"v":1,"type":"intent","ts":"2024-05-01T12:00:02Z","batch":"J","item":"i2","charge":"ch_2","attempt":1,"key":"refundkit:J:i2:1","amount":500}
`
	for _, c := range []struct {
		name, plan string
		mismatch   *audit.BatchMismatchError
		findings   []string
	}{
		{"another batch", `{"batch":"B","item":"i1","charge":"ch_1","amount":500}` + "\n" + `{"batch":"B","item":"i2","charge":"ch_2","amount":500}` + "\n",
			&audit.BatchMismatchError{Plan: []string{"B"}, Journals: []string{"J", "K"}}, nil},
		{"one batch in common", `{"batch":"K","item":"i1","charge":"ch_1","amount":500}` + "\n" + `{"batch":"B","item":"i2","charge":"ch_2","amount":500}` + "\n",
			nil, []string{"missing", "not_in_plan"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := audit.New()
			if err := a.AddPlan(strings.NewReader(c.plan), "plan.jsonl"); err != nil {
				t.Fatal(err)
			}
			if _, err := a.AddJournal(strings.NewReader(journal), "j.jsonl"); err != nil {
				t.Fatal(err)
			}
			var kinds []string
			rep, err := a.Run(context.Background(), audit.Options{}, func(f *audit.Finding) { kinds = append(kinds, f.Finding) })
			if c.mismatch != nil {
				var got *audit.BatchMismatchError
				if !errors.As(err, &got) || !reflect.DeepEqual(got, c.mismatch) || rep != nil || len(kinds) > 0 {
					t.Fatalf("report %v, findings %v, error %#v; want no report, no finding and %#v", rep, kinds, err, c.mismatch)
				}
				if want := "the plan is batch B and the journals are batches J, K: no batch is in both"; !strings.HasPrefix(err.Error(), want) {
					t.Errorf("error %q does not start %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range c.findings {
				if !strings.Contains(strings.Join(kinds, " "), k) {
					t.Errorf("findings %v, want a %s among them", kinds, k)
				}
			}
		})
	}
}
