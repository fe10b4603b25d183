package paypal

// Where a PayPal refund says whose it is. PayPal has no metadata map: of a
// refund's own fields, custom_id is the one made for this ("Used to
// reconcile API caller-initiated transactions with PayPal transactions.
// Appears in transaction and settlement reports", 1-127 characters). It is
// not shown to the payer, unlike invoice_id and note_to_payer, and PayPal
// does not require it to be unique, unlike invoice_id (422
// DUPLICATE_INVOICE_ID: "Invoice ID was previously used to refund a
// capture"), which refundkit therefore leaves to the merchant.

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/refund"
)

const (
	customPrefix  = "refundkit,"
	digestPrefix  = customPrefix + "sha256,"
	maxCustomID   = 127
	metaSeparator = ","
)

// customID names batch, item and attempt in a custom_id:
// refundkit,<batch>,<item>,<attempt>. Only letters, digits and - _ . ,
// are used, the characters PayPal's refund schema shows for custom_id: an
// item's ':' is written as ',' (batches hold neither, items no ','), so the
// last field is the attempt and the second the batch. An id that would not
// fit PayPal's 127 characters is a digest of the three instead, which the
// client that sent it can still match (see matchCustomID).
func customID(batch, item string, attempt int) string {
	s := customPrefix + batch + metaSeparator + strings.ReplaceAll(item, ":", metaSeparator) + metaSeparator + strconv.Itoa(attempt)
	if len(s) <= maxCustomID {
		return s
	}
	sum := sha256.Sum256([]byte(batch + "\x00" + item + "\x00" + strconv.Itoa(attempt)))
	return digestPrefix + hex.EncodeToString(sum[:20])
}

// parseCustomID reads batch, item and attempt back from a custom_id that
// customID wrote in full; ok is false for any other (a digest, the
// merchant's own, none).
func parseCustomID(s string) (batch, item, attempt string, ok bool) {
	rest, found := strings.CutPrefix(s, customPrefix)
	if !found || strings.HasPrefix(s, digestPrefix) {
		return "", "", "", false
	}
	parts := strings.Split(rest, metaSeparator)
	if len(parts) < 3 {
		return "", "", "", false
	}
	batch, attempt = parts[0], parts[len(parts)-1]
	item = strings.Join(parts[1:len(parts)-1], ":")
	if !refund.ValidBatch(batch) || item == "" {
		return "", "", "", false
	}
	if n, err := strconv.Atoi(attempt); err != nil || n < 1 {
		return "", "", "", false
	}
	return batch, item, attempt, true
}

// metadata is what a refund's custom_id says in refundkit's metadata
// keys; nil when it says nothing refundkit can read.
func metadata(custom string) map[string]string {
	batch, item, attempt, ok := parseCustomID(custom)
	if !ok {
		return nil
	}
	return map[string]string{refund.MetaBatch: batch, refund.MetaItem: item, refund.MetaAttempt: attempt}
}

// matchCustomID is the metadata of a refund that a create call for item
// it, attempt, was answered with: what its custom_id says, or, for a
// digest, the item's own when the digest is the one sent. Anything else
// leaves the metadata as the answer gives it, and the engine finds the
// answer is not the item's.
func matchCustomID(custom string, it *refund.Item, attempt int) map[string]string {
	if m := metadata(custom); m != nil {
		return m
	}
	if strings.HasPrefix(custom, digestPrefix) && custom == customID(it.Batch, it.Item, attempt) {
		return map[string]string{refund.MetaBatch: it.Batch, refund.MetaItem: it.Item, refund.MetaAttempt: strconv.Itoa(attempt)}
	}
	return nil
}
