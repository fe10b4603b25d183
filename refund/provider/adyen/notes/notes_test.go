package notes

import (
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var testKey = []byte("0123456789abcdef0123456789abcdef")

// note is a signed notification of event for the refund psp of the
// payment orig.
func note(event, psp, orig string) wire.Notification {
	it := wire.Item{
		Amount:              wire.Amount{Currency: "EUR", Value: 1250},
		EventCode:           event,
		EventDate:           "2026-11-02T10:00:00+01:00",
		MerchantAccountCode: "RefundkitTest",
		MerchantReference:   "refundkit:b:item-1:1",
		OriginalReference:   orig,
		PSPReference:        psp,
		Success:             "true",
	}
	wire.SetSignature(&it, testKey)
	return wire.Notification{V: wire.Version, Received: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC), Item: it}
}

func pspsOf(ns []wire.Notification) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Item.EventCode + ":" + n.Item.PSPReference
	}
	return out
}
