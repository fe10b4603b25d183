package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
)

// pspPlanOf is planOf on Adyen payments, named by psp_reference.
func pspPlanOf(batch string, n int, amount int64) []refund.PlanLine {
	lines := planOf(batch, n, amount)
	for i, l := range lines {
		l.Item.Charge, l.Item.PSPReference = "", fmt.Sprintf("881565896176%04d", i+1)
	}
	return lines
}

// pspRecords are it's intent and refund on its psp_reference.
func pspRecords(it *refund.Item, id string) []*journal.Record {
	in, out := intent(it, 1), refunded(it, id)
	in.PSPReference, out.PSPReference = it.PSPReference, it.PSPReference
	return []*journal.Record{in, out}
}

// Records bind an item to its psp_reference in the checkpoint as in a
// journal: a plan naming another is refused at its line, the one the
// records were made with is taken, and a stored plan edited to another
// psp_reference is refused naming both.
func TestPSPReferenceBindsInTheCheckpoint(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	c := open(t, url, "a", time.Minute)
	plan := pspPlanOf("b1", 3, 100)
	other := *plan[1].Item
	other.PSPReference = "QFQTPCQ8HXSKGK82"
	if _, _, err := c.Import(ctx, bytes.NewReader(journalOf(t, pspRecords(&other, "re_1")...)), "j.jsonl", 0); err != nil {
		t.Fatal(err)
	}
	err := c.Load(ctx, plan)
	wantInputError(t, "load", err, 2)
	if !strings.Contains(err.Error(), `the plan names psp_reference "8815658961760002", but the journal records psp_reference "QFQTPCQ8HXSKGK82"`) {
		t.Errorf("load: %v, want both psp_references named", err)
	}
	plan[1].Item.PSPReference = other.PSPReference
	if err := c.Load(ctx, plan); err != nil {
		t.Fatalf("the plan the records were made with: %v", err)
	}
	st, ok, err := c.Lookup("b1", "i2")
	if err != nil || !ok || st.Status != journal.StatusRefunded || st.PSPReference != other.PSPReference || st.Charge != "" {
		t.Errorf("Lookup = %+v, %v, %v; want refunded on psp_reference %s", st, ok, err, other.PSPReference)
	}

	edited := pspPlanOf("b1", 3, 100)
	edited[1].Item.PSPReference = other.PSPReference
	edited[2].Item.PSPReference = "ABCDEFGHIJKLMNOP"
	var ie *refund.InputError
	err = c.Load(ctx, edited)
	if !errors.As(err, &ie) || ie.Line != 3 || !strings.Contains(err.Error(), `psp_reference "ABCDEFGHIJKLMNOP" here, "8815658961760003" in the checkpoint`) {
		t.Fatalf("an edited psp_reference: got %v", err)
	}
}
