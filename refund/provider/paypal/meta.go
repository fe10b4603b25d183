package paypal

// Where a PayPal refund says whose it is: PayPal has no metadata map, and
// custom_id is made for this (not shown to the payer, and need not be
// unique, unlike invoice_id, which refundkit leaves to the merchant).

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
// refundkit,<batch>,<item>,<attempt>, an item's ':' written as ',' (the
// characters PayPal's schema shows). One past 127 characters is a digest of
// the three instead, which only the client that sent it can match.
func customID(batch, item string, attempt int) string {
	s := customPrefix + batch + metaSeparator + strings.ReplaceAll(item, ":", metaSeparator) + metaSeparator + strconv.Itoa(attempt)
	if len(s) <= maxCustomID {
		return s
	}
	sum := sha256.Sum256([]byte(batch + "\x00" + item + "\x00" + strconv.Itoa(attempt)))
	return digestPrefix + hex.EncodeToString(sum[:20])
}

// parseCustomID reads back a custom_id that customID wrote in full; ok is
// false for any other (a digest, the merchant's own, none).
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

// matchCustomID is the metadata of a refund a create call for item it,
// attempt, was answered with: what its custom_id says, or, for a digest,
// the item's own when the digest is the one sent.
func matchCustomID(custom string, it *refund.Item, attempt int) map[string]string {
	if m := metadata(custom); m != nil {
		return m
	}
	if strings.HasPrefix(custom, digestPrefix) && custom == customID(it.Batch, it.Item, attempt) {
		return map[string]string{refund.MetaBatch: it.Batch, refund.MetaItem: it.Item, refund.MetaAttempt: strconv.Itoa(attempt)}
	}
	return nil
}
