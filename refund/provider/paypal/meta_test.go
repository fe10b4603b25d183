package paypal

import (
	"strconv"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
)

// TestCustomID: batch, item and attempt come back from the custom_id they
// were written in, an item's ':' included; an id too long for PayPal's 127
// characters is a digest that only the sender can match.
func TestCustomID(t *testing.T) {
	long := strings.Repeat("x", 128)
	for _, tc := range []struct {
		batch, item string
		attempt     int
	}{
		{"b1", "i1", 1}, {"2026-11_refunds.v2", "order:42:line-3", 17}, {"b", "a.b_c-d", 2},
		{strings.Repeat("b", 64), strings.Repeat("i", 50), 1},
	} {
		s := customID(tc.batch, tc.item, tc.attempt)
		if len(s) > maxCustomID || strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,") != "" {
			t.Errorf("custom_id %q: over 127 characters or outside PayPal's pattern", s)
		}
		m := metadata(s)
		if m[refund.MetaBatch] != tc.batch || m[refund.MetaItem] != tc.item || m[refund.MetaAttempt] != strconv.Itoa(tc.attempt) {
			t.Errorf("%q read back as %v", s, m)
		}
	}
	it := &refund.Item{Batch: strings.Repeat("b", 64), Item: long}
	s := customID(it.Batch, it.Item, 3)
	if len(s) > maxCustomID || metadata(s) != nil {
		t.Fatalf("long: %q (%d), metadata %v", s, len(s), metadata(s))
	}
	if m := matchCustomID(s, it, 3); !refund.Matches(&refund.Refund{Metadata: m}, it.Batch, it.Item) || m[refund.MetaAttempt] != "3" {
		t.Errorf("the sender cannot match its digest: %v", m)
	}
	if m := matchCustomID(s, it, 4); m != nil {
		t.Errorf("another attempt's digest matched: %v", m)
	}
	for _, junk := range []string{"", "INV-1", "refundkit,", "refundkit,b,i", "refundkit,b,i,0", "refundkit,b,i,x", "refundkit,-b,i,1", "refundkit,b,,1"} {
		if m := metadata(junk); m != nil {
			t.Errorf("metadata(%q) = %v, want none", junk, m)
		}
	}
}
