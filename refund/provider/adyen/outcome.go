package adyen

// What a refund's notifications say of it, decided from all of them: they
// come more than once and out of order.

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

// Reasons a refund's FailureReason gives for its status.
const (
	ReasonFailedLater    = "REFUND_FAILED"                      // a later event undid it
	ReasonReversed       = "REFUNDED_REVERSED"                  // a later event undid it; audit reports it apart
	ReasonContradicts    = refund.ReasonNotificationsContradict // pending: success and failure, or two amounts
	ReasonSuccessUnknown = "success_not_understood"             // success neither "true" nor "false"
)

// Outcome is refund id as its notifications tell it; ok is false when none
// names it. True and false for one refund contradict: it stays pending,
// for a person; a success neither leaves a status on no allow-list.
func Outcome(id string, notes []wire.Notification) (r refund.Refund, ok bool) {
	var yes, no, failedLater, reversed, differ bool
	odd := "" // the status of a success neither true nor false
	for i := range notes {
		it := &notes[i].Item
		if it.PSPReference != id || !wire.RefundEvent(it.EventCode) {
			continue
		}
		if !ok {
			ok = true
			r = refund.Refund{ID: id, PSPReference: it.OriginalReference, Amount: it.Amount.Value,
				Currency: strings.ToLower(it.Amount.Currency), Status: refund.RefundPending,
				Created: notes[i].Received.Unix(), Metadata: metadata(it.MerchantReference)}
		}
		if it.Amount.Value != 0 && (it.Amount.Value != r.Amount || !strings.EqualFold(it.Amount.Currency, r.Currency)) {
			differ = true // which is its amount cannot be told
		}
		switch it.EventCode {
		case wire.EventRefund:
			switch it.Success {
			case "true":
				yes = true
			case "false":
				no = true
				r.FailureReason = cmp.Or(r.FailureReason, it.Reason)
			default:
				odd = cmp.Or(odd, "success "+strconv.Quote(it.Success))
			}
		case wire.EventRefundFailed:
			failedLater = true
		case wire.EventRefundReversed:
			reversed = true
		}
	}
	switch {
	case !ok:
	case reversed:
		r.Status, r.FailureReason = refund.RefundFailed, ReasonReversed
	case failedLater:
		r.Status, r.FailureReason = refund.RefundFailed, ReasonFailedLater
	case odd != "":
		r.Status, r.FailureReason = odd, ReasonSuccessUnknown
	case yes && no, differ:
		r.Status, r.FailureReason = refund.RefundPending, ReasonContradicts
	case yes:
		r.Status = refund.RefundSucceeded
	case no:
		r.Status = refund.RefundFailed
	}
	return r, ok
}

// Refunds are the refunds notes tell of, newest first.
func Refunds(notes []wire.Notification) []refund.Refund {
	var ids []string
	seen := make(map[string]bool)
	for i := range notes {
		it := &notes[i].Item
		if wire.RefundEvent(it.EventCode) && !seen[it.PSPReference] {
			seen[it.PSPReference] = true
			ids = append(ids, it.PSPReference)
		}
	}
	out := make([]refund.Refund, 0, len(ids))
	for _, id := range slices.Backward(ids) {
		if r, ok := Outcome(id, notes); ok {
			out = append(out, r)
		}
	}
	return out
}

// metadata is what a reference says; nil for one not refundkit's.
func metadata(ref string) map[string]string {
	batch, item, attempt, ok := wire.ParseReference(ref)
	if !ok {
		return nil
	}
	return map[string]string{refund.MetaBatch: batch, refund.MetaItem: item, refund.MetaAttempt: strconv.Itoa(attempt)}
}
