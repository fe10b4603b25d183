package paypalsim

import (
	"errors"
	"time"

	"github.com/refundkit/refundkit/refund/money"
	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

// The objects of PayPal's Payments v2 API the simulator keeps.

type moneyJSON struct {
	CurrencyCode string `json:"currency_code"`
	Value        string `json:"value"`
}

type linkJSON struct {
	Href   string `json:"href"`
	Rel    string `json:"rel"`
	Method string `json:"method"`
}

type statusDetailsJSON struct {
	Reason string `json:"reason"`
}

// refundJSON is a refund, as refund and show-refund answer it.
type refundJSON struct {
	ID            string             `json:"id"`
	Amount        moneyJSON          `json:"amount"`
	Status        string             `json:"status"`
	StatusDetails *statusDetailsJSON `json:"status_details,omitempty"`
	CustomID      string             `json:"custom_id,omitempty"`
	InvoiceID     string             `json:"invoice_id,omitempty"`
	NoteToPayer   string             `json:"note_to_payer,omitempty"`
	// TotalRefundedAmount: what the capture has given back to date.
	SellerPayableBreakdown payableJSON `json:"seller_payable_breakdown"`
	CreateTime             string      `json:"create_time"`
	UpdateTime             string      `json:"update_time"`
	Links                  []linkJSON  `json:"links"`
}

type payableJSON struct {
	GrossAmount         moneyJSON `json:"gross_amount"`
	PayPalFee           moneyJSON `json:"paypal_fee"`
	NetAmount           moneyJSON `json:"net_amount"`
	TotalRefundedAmount moneyJSON `json:"total_refunded_amount"`
}

// captureJSON is a captured payment, as show-capture answers it.
type captureJSON struct {
	ID                        string         `json:"id"`
	Status                    string         `json:"status"`
	Amount                    moneyJSON      `json:"amount"`
	FinalCapture              bool           `json:"final_capture"`
	SellerReceivableBreakdown receivableJSON `json:"seller_receivable_breakdown"`
	// SupplementaryData names the capture's order, if any.
	SupplementaryData *supplementaryJSON `json:"supplementary_data,omitempty"`
	CreateTime        string             `json:"create_time"`
	UpdateTime        string             `json:"update_time"`
	Links             []linkJSON         `json:"links"`
}

type supplementaryJSON struct {
	RelatedIDs struct {
		OrderID string `json:"order_id,omitempty"`
	} `json:"related_ids"`
}

type receivableJSON struct {
	GrossAmount moneyJSON `json:"gross_amount"`
	PayPalFee   moneyJSON `json:"paypal_fee"`
	NetAmount   moneyJSON `json:"net_amount"`
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// object renders r at now, base the URL for links; the caller holds r.cp.mu.
func (r *refund) object(base string, now time.Time) refundJSON {
	cur := r.cp.currency
	st := r.statusAt(now)
	o := refundJSON{
		ID: r.ID, Amount: moneyOf(r.Amount, cur), Status: st,
		CustomID: r.CustomID, InvoiceID: r.InvoiceID, NoteToPayer: r.NoteToPayer,
		SellerPayableBreakdown: payableJSON{GrossAmount: moneyOf(r.Amount, cur), PayPalFee: moneyOf(0, cur),
			NetAmount: moneyOf(r.Amount, cur), TotalRefundedAmount: moneyOf(r.cp.held(now), cur)},
		CreateTime: stamp(r.created), UpdateTime: stamp(r.updatedAt(now)),
		Links: []linkJSON{
			{Href: base + "/v2/payments/refunds/" + r.ID, Rel: "self", Method: "GET"},
			{Href: base + "/v2/payments/captures/" + r.cp.id, Rel: "up", Method: "GET"},
		},
	}
	if reason := reasonOf(st); reason != "" {
		o.StatusDetails = &statusDetailsJSON{Reason: reason}
	}
	return o
}

// render is r's JSON as seen at now, under its capture's lock.
func (r *refund) render(base string, now time.Time) []byte {
	r.cp.mu.Lock()
	defer r.cp.mu.Unlock()
	return sim.MustJSON(r.object(base, now))
}

// object renders the capture as seen at now; the caller holds cp.mu.
func (cp *capture) object(base string, now time.Time) captureJSON {
	held := cp.held(now)
	updated := time.Unix(cp.created, 0)
	for _, r := range cp.refunds {
		if u := r.updatedAt(now); u.After(updated) && !u.After(now) {
			updated = u
		}
	}
	o := captureJSON{
		ID: cp.id, Status: cp.status(held), Amount: moneyOf(cp.amount, cp.currency), FinalCapture: true,
		SellerReceivableBreakdown: receivableJSON{GrossAmount: moneyOf(cp.amount, cp.currency),
			PayPalFee: moneyOf(0, cp.currency), NetAmount: moneyOf(cp.amount, cp.currency)},
		CreateTime: stamp(time.Unix(cp.created, 0)), UpdateTime: stamp(updated),
		Links: []linkJSON{
			{Href: base + "/v2/payments/captures/" + cp.id, Rel: "self", Method: "GET"},
			{Href: base + "/v2/payments/captures/" + cp.id + "/refund", Rel: "refund", Method: "POST"},
		},
	}
	if id := cp.orderID(); id != "" {
		o.SupplementaryData = &supplementaryJSON{}
		o.SupplementaryData.RelatedIDs.OrderID = id
		// PayPal's captures link "up" to their order.
		o.Links = append(o.Links, linkJSON{Href: base + "/v2/checkout/orders/" + id, Rel: "up", Method: "GET"})
	}
	return o
}

// maxValue is the longest value PayPal's money schema takes; wire converts
// the money, what it refuses is sorted into PayPal's answers below.
const maxValue = 32

// valueProblem is why a value string is refused.
type valueProblem int

const (
	valueOK          valueProblem = iota
	valueSyntax                   // not a decimal number: 400 INVALID_PARAMETER_SYNTAX
	valuePrecision                // more decimals than the currency has: 422 DECIMAL_PRECISION
	valueDecimals                 // decimals in a whole-only currency: 422 DECIMALS_NOT_SUPPORTED
	valueNotPositive              // zero or negative: 422 CANNOT_BE_ZERO_OR_NEGATIVE
)

// parseValue turns a refund's value string into minor units of currency.
func parseValue(value, currency string) (int64, valueProblem) {
	if len(value) > maxValue {
		return 0, valueSyntax
	}
	n, err := wire.ParseValue(value, currency)
	switch {
	case errors.Is(err, wire.ErrDecimalsNotSupported):
		return 0, valueDecimals
	case errors.Is(err, money.ErrPrecision):
		return 0, valuePrecision
	case err != nil:
		return 0, valueSyntax
	case n <= 0:
		return 0, valueNotPositive
	}
	return n, valueOK
}

// moneyOf is an amount as the API writes it; captures and their parts are
// whole in whole-only currencies, so wire.Value cannot refuse one.
func moneyOf(minor int64, currency string) moneyJSON {
	v, err := wire.Value(minor, currency)
	if err != nil {
		panic(err)
	}
	return moneyJSON{CurrencyCode: currency, Value: v}
}
