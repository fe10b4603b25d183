package refund

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// PlanDocs returns each line's item as canonical JSON (fields in order,
// metadata keys sorted) and the digest of the docs in item order: what a
// shared checkpoint stores of a batch's plan, and how it tells the same
// plan, whatever the order of its lines, from another.
func PlanDocs(lines []PlanLine) (docs []string, digest []byte, err error) {
	docs = make([]string, len(lines))
	for i, pl := range lines {
		b, err := json.Marshal(pl.Item)
		if err != nil {
			return nil, nil, err
		}
		docs[i] = string(b)
	}
	order := make([]int, len(lines))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(lines[a].Item.Item, lines[b].Item.Item) })
	h := sha256.New()
	for _, i := range order {
		h.Write([]byte(docs[i]))
		h.Write([]byte{'\n'})
	}
	return docs, h.Sum(nil), nil
}

// FieldsDiffer names, for people, the fields of it that differ from doc,
// an item as PlanDocs stored it.
func FieldsDiffer(it *Item, doc string) string {
	var was Item
	if err := json.Unmarshal([]byte(doc), &was); err != nil {
		return "the stored item does not decode: " + err.Error()
	}
	var diffs []string
	add := func(field, now, then string) {
		if now != then {
			diffs = append(diffs, fmt.Sprintf("%s %q here, %q in the checkpoint", field, now, then))
		}
	}
	add("charge", it.Charge, was.Charge)
	add("payment_intent", it.PaymentIntent, was.PaymentIntent)
	add("capture", it.Capture, was.Capture)
	add("psp_reference", it.PSPReference, was.PSPReference)
	if it.Amount != was.Amount {
		diffs = append(diffs, fmt.Sprintf("amount %d here, %d in the checkpoint", it.Amount, was.Amount))
	}
	add("currency", it.Currency, was.Currency)
	add("reason", it.Reason, was.Reason)
	if !maps.Equal(it.Metadata, was.Metadata) {
		diffs = append(diffs, "metadata differs")
	}
	if len(diffs) == 0 {
		return "the same fields, encoded otherwise"
	}
	return strings.Join(diffs, ", ")
}
