package refund

// The checks of what a provider answers or a checkpoint holds against the
// plan item: pure functions that say what is wrong, and decide nothing.

import (
	"fmt"
	"strconv"

	"github.com/refundkit/refundkit/journal"
)

// verify reports how r fails to be the refund of it: another payment,
// another amount than the one sent, another currency than the plan's, or
// metadata naming another item (or, with attempt > 0, another attempt).
func verify(it *Item, r *Refund, attempt int) error {
	for _, f := range [...]struct{ name, planned, got string }{{"charge", it.Charge, r.Charge},
		{"payment intent", it.PaymentIntent, r.PaymentIntent}, {"capture", it.Capture, r.Capture}, {"psp_reference", it.PSPReference, r.PSPReference}} {
		if f.planned != "" && f.got != f.planned {
			return fmt.Errorf("refund %s names %s %q, not %q", r.ID, f.name, f.got, f.planned)
		}
	}
	switch {
	case it.Amount > 0 && r.Amount != it.Amount:
		return fmt.Errorf("refund %s is of %d, not the %d sent", r.ID, r.Amount, it.Amount)
	case it.Currency != "" && r.Currency != it.Currency:
		return fmt.Errorf("refund %s is in %q, not the plan's %q", r.ID, r.Currency, it.Currency)
	case !Matches(r, it.Batch, it.Item):
		return fmt.Errorf("refund %s names batch %q item %q in its metadata, not %q %q",
			r.ID, r.Metadata[MetaBatch], r.Metadata[MetaItem], it.Batch, it.Item)
	case attempt > 0 && r.Metadata[MetaAttempt] != strconv.Itoa(attempt):
		return fmt.Errorf("refund %s names attempt %q in its metadata, not %d", r.ID, r.Metadata[MetaAttempt], attempt)
	}
	return nil
}

// contradicts reports how a refund read back to settle it says it is not
// the item's: any field it says (one read before a notification says only
// its id and status) that differs from the plan's, or from the journaled
// record of that refund, st. A field not said is no contradiction.
func contradicts(it *Item, st journal.ItemState, r *Refund) error {
	said := *r
	p := paymentOf(it)
	for _, f := range []struct {
		got  *string
		want string
	}{{&said.Charge, p.Charge}, {&said.PaymentIntent, p.PaymentIntent}, {&said.Capture, p.Capture},
		{&said.PSPReference, p.PSPReference}, {&said.Currency, it.Currency}} {
		if *f.got == "" {
			*f.got = f.want
		}
	}
	if said.Amount == 0 {
		said.Amount = it.Amount
	}
	if said.Metadata[MetaBatch] == "" {
		said.Metadata = map[string]string{MetaBatch: it.Batch, MetaItem: it.Item}
	}
	if err := verify(it, &said, 0); err != nil {
		return err
	}
	switch {
	case r.Amount != 0 && st.Amount > 0 && r.Amount != st.Amount:
		return fmt.Errorf("refund %s is of %d, but the journal records it of %d", r.ID, r.Amount, st.Amount)
	case r.Currency != "" && st.Currency != "" && r.Currency != st.Currency:
		return fmt.Errorf("refund %s is in %q, but the journal records it in %q", r.ID, r.Currency, st.Currency)
	}
	return nil
}

// toldDiffers reports how refund x, as the provider's events tell it,
// fails to be refund id of the item as the plan and journal bind it.
// Stricter than a read's check: a provider's own answer may say only a
// status, an event must say the whole binding itself (payment, amount,
// currency, batch, item and, for the journaled refund, attempt), or it
// settles nothing.
func toldDiffers(it *Item, st journal.ItemState, id string, x *Refund) error {
	attempt := 0
	if id == st.Refund {
		attempt = st.Attempt
	}
	switch {
	case x.ID != id:
		return fmt.Errorf("asked for refund %s, the events told of %s", id, x.ID)
	case x.Amount <= 0 || x.Currency == "":
		return fmt.Errorf("the events tell of refund %s with no amount or currency", id)
	case x.Charge == "" && x.PaymentIntent == "" && x.Capture == "" && x.PSPReference == "":
		return fmt.Errorf("the events tell of refund %s on no payment", id)
	}
	if err := verify(it, x, attempt); err != nil {
		return err
	}
	return contradicts(it, st, x)
}

// CheckBinding reports a plan item that says otherwise than the journal (or
// checkpoint) about what its refund is: another payment, amount or
// currency than its intent sent (the plan was edited after). It is the one
// check of a plan item against its records, however they arrived.
func CheckBinding(it *Item, st journal.ItemState) error {
	hint := ": the journal binds an item to what was sent; plan the changed refund under a new item id"
	if st.Status == journal.StatusInDoubt {
		// Its call may have made a refund a provider without a full
		// look-up (Adyen) cannot show: a new item id now could be a second.
		hint = ": the journal binds an item to what was sent, and this one is in doubt (its call may have made a refund): settle it first, by running again with the plan as it was (with Adyen, once its notifications have come), then plan what is still owed under a new item id"
	}
	if err := CheckRecords(it.Batch, it.Item, st); err != nil {
		return err
	}
	bound := Payment{st.Charge, st.PaymentIntent, st.Capture, st.PSPReference}
	if st.Rebound {
		return fmt.Errorf("item %q of batch %q: the journal's records name two different payments for it (%s %s first): records of two plans merged into one journal? Which payment the item is cannot be told; a person checks its refunds at the provider and plans what is still owed under a new item id", it.Item, it.Batch, bound.field(), bound.ID())
	}
	planned := fmt.Sprintf("the plan names %s %q", paymentOf(it).field(), it.Target())
	for _, f := range [...]struct{ name, bound, planned string }{{"charge", st.Charge, it.Charge},
		{"payment_intent", st.PaymentIntent, it.PaymentIntent}, {"capture", st.Capture, it.Capture}, {"psp_reference", st.PSPReference, it.PSPReference}} {
		if f.bound != "" && f.planned != f.bound {
			return fmt.Errorf("item %q of batch %q: %s, but the journal records %s %q for it%s", it.Item, it.Batch, planned, f.name, f.bound, hint)
		}
	}
	switch {
	case st.Sent && it.Amount != st.SentAmount:
		return fmt.Errorf("item %q of batch %q: amount %s, but the journal records %s as sent%s", it.Item, it.Batch, amountText(it.Amount), amountText(st.SentAmount), hint)
	case st.Sent && it.Currency != "" && st.SentCurrency != "" && it.Currency != st.SentCurrency:
		return fmt.Errorf("item %q of batch %q: currency %q, but the journal records %q as sent%s", it.Item, it.Batch, it.Currency, st.SentCurrency, hint)
	case st.Credited() && it.Amount > 0 && st.Amount != it.Amount:
		// The refund's own amount is what a partial item must match.
		return fmt.Errorf("item %q of batch %q: amount %d, but the journal records refund %s of %d for it%s", it.Item, it.Batch, it.Amount, st.Refund, st.Amount, hint)
	case (st.Status == journal.StatusRefunded || st.Status == journal.StatusPending) && it.Currency != "" && st.Currency == "":
		// A refund the provider answered always says its currency: a
		// record that says none does not show the money moved in the plan's.
		return fmt.Errorf("item %q of batch %q: currency %q, but the journal records refund %s in no currency for it: a record not written by refundkit, or edited; nothing is sent for it until a person checks the refund at the provider (audit --stripe) and its record", it.Item, it.Batch, it.Currency, st.Refund)
	case st.Credited() && it.Currency != "" && st.Currency != "" && st.Currency != it.Currency:
		return fmt.Errorf("item %q of batch %q: currency %q, but the journal records refund %s in %q for it%s", it.Item, it.Batch, it.Currency, st.Refund, st.Currency, hint)
	}
	return nil
}

// CheckRecords reports an item whose records contradict themselves,
// whatever its plan says (edited, or merged by hand): the item is not
// done, and nothing is sent for it.
func CheckRecords(batch, item string, st journal.ItemState) error {
	switch {
	case st.Contradiction != "":
		return fmt.Errorf("item %q of batch %q: the journal's records of it cannot all be true (%s): records of two runs or plans merged by hand, or edited? Nothing is sent for it; a person checks its refund at the provider (audit --stripe) and mends the journal", item, batch, st.Contradiction)
	case st.Credited() && st.Amount <= 0:
		// No provider refunds nothing, or less than nothing.
		return fmt.Errorf("item %q of batch %q: the journal records refund %s of %d for it, which is no refund: a record not written by refundkit, or edited; nothing is sent for it until a person checks the refund at the provider (audit --stripe) and its record", item, batch, st.Refund, st.Amount)
	}
	return nil
}

// attemptOf is the attempt r's metadata names, else def.
func attemptOf(r *Refund, def int) int {
	if n, err := strconv.Atoi(r.Metadata[MetaAttempt]); err == nil && n >= 1 {
		return n
	}
	return def
}

func amountText(a int64) string {
	if a == 0 {
		return "0 (the full remaining amount)"
	}
	return strconv.FormatInt(a, 10)
}
