package stripesim

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/refund/sim"
)

// refund is one refund as made; only its status changes (atomic, for lists).
type refund struct {
	Refund // Status is status's
	seq    int
	ch     *charge
	status atomic.Pointer[string]

	// A pending one's end, fixed when made (madePending).
	settleAt      time.Time // zero: never
	final         string
	failureReason string      // once failed
	told          atomic.Bool // a receiver accepted its final refund.updated
}

// Refund is a refund as the simulator holds it, for checks.
type Refund struct {
	ID            string            `json:"id"`
	Charge        string            `json:"charge"`
	PaymentIntent string            `json:"payment_intent,omitempty"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	Status        string            `json:"status"`
	Reason        string            `json:"reason,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Created       int64             `json:"created"`
	FailureReason string            `json:"failure_reason,omitempty"`
	// IdempotencyKey made it; Stripe does not show it, checks may.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// addRefund records a new refund on ch, which the caller has locked.
func (s *Server) addRefund(ch *charge, amount int64, status, reason string, md map[string]string, key string) *refund {
	re := s.refunds.Add(func(n int, id string) *refund {
		re := &refund{Refund: Refund{ID: id, Charge: ch.ID, PaymentIntent: ch.PaymentIntent, Amount: amount, Currency: ch.Currency,
			Reason: reason, Metadata: md, Created: s.now().Unix(), IdempotencyKey: key}, seq: n, ch: ch}
		re.status.Store(&status)
		return re
	})
	ch.refunds = append(ch.refunds, re)
	if countsAgainstCharge(status) {
		ch.AmountRefunded += amount
	}
	return re
}

// refundPrefix and the number in ten digits or more make a refund's id.
const refundPrefix = "re_sim"

func (s *Server) refundByID(id string) *refund {
	re, _ := s.refunds.Get(id)
	return re
}

// Refunds returns every refund, oldest first, for checks.
func (s *Server) Refunds() []Refund {
	s.settleDue()
	return sim.Map(s.refunds.All(), func(re *refund) Refund {
		r := re.Refund
		r.Status, r.Metadata = *re.status.Load(), copyMetadata(r.Metadata)
		if r.Status == StatusFailed {
			r.FailureReason = re.failureReason
		}
		return r
	})
}

func (s *Server) getRefund(c apiCall) sim.Answer {
	expand, a, ok := parseExpandOnly(c.form, "charge")
	if !ok {
		return a
	}
	re := s.refundByID(c.id)
	if re == nil {
		return missing("refund", "id", c.id)
	}
	return found(re.render(expand))
}

// cancelRefund is POST /v1/refunds/{id}/cancel after the idempotency layer.
func (s *Server) cancelRefund(c apiCall) sim.Answer {
	id := c.id
	expand, a, ok := parseExpandOnly(c.form, "charge")
	if !ok {
		return a
	}
	re := s.refundByID(id)
	if re == nil {
		return missing("refund", "id", id)
	}
	ch := re.ch
	ch.mu.Lock()
	if st := *re.status.Load(); st != StatusRequiresAction {
		ch.mu.Unlock()
		return refused(http.StatusBadRequest, sim.Error{Type: typeInvalid,
			Message: fmt.Sprintf("Only refunds with a status of requires_action can be canceled; refund %s has status %s.", id, st)})
	}
	canceled := StatusCanceled
	re.status.Store(&canceled)
	ch.AmountRefunded -= re.Amount
	obj, plain := re.object(expand), re.object(false)
	ch.mu.Unlock()
	s.stats.refundsCanceled.Add(1)
	if s.events != nil {
		// As Stripe tells a cancel: the refund and the charge's refund updated.
		reqID := sim.Padded("req_sim", 10, int(c.seq)) // serveAPI's
		req, prev := eventRequest{ID: &reqID, IdempotencyKey: optional(c.key)}, map[string]any{"status": StatusRequiresAction}
		s.events.send(c.f, EventRefundUpdated, plain, prev, req, s.now(), nil)
		s.events.send(c.f, EventChargeRefundUpdated, plain, prev, req, s.now(), nil)
	}
	return sim.Answer{Status: http.StatusOK, Body: sim.MustJSON(obj), Save: true}
}

// listRefunds is GET /v1/refunds: newest first, paged, filtered.
func (s *Server) listRefunds(c apiCall) sim.Answer {
	form := c.form
	var chargeID, intentID, after, before string
	ids := map[string]*string{"charge": &chargeID, "payment_intent": &intentID, "starting_after": &after, "ending_before": &before}
	limit := 10
	expand := false
	for name, vals := range form {
		v := vals[len(vals)-1]
		switch {
		case ids[name] != nil:
			*ids[name] = v
		case name == "limit":
			n, err := strconv.Atoi(v)
			if err != nil {
				return invalid("parameter_invalid_integer", "limit", "Invalid integer: %s", v)
			}
			if n < 1 || n > 100 {
				return invalid("parameter_invalid_integer", "limit", "This value must be between 1 and 100 (it currently is %d).", n)
			}
			limit = n
		case isArrayParam(name, "expand"):
			for _, e := range vals {
				if e != "data.charge" {
					return invalid("", "expand", "This property cannot be expanded (%s).", e)
				}
				expand = true
			}
		default:
			// created filters too: not simulated, so refused.
			return invalid("parameter_unknown", name, "Received unknown parameter: %s", name)
		}
	}
	if chargeID != "" && intentID != "" {
		return invalid("", "payment_intent", "You cannot specify both a charge and a payment_intent. Please specify one or the other.")
	}
	if after != "" && before != "" {
		return invalid("", "ending_before", "You may only specify one of these parameters: ending_before, starting_after.")
	}

	var scope []*refund
	if chargeID == "" && intentID == "" {
		scope = s.refunds.All()
	} else {
		ch, a, ok := s.target(chargeID, intentID)
		if !ok {
			return a
		}
		ch.mu.Lock()
		scope = ch.refunds[:len(ch.refunds):len(ch.refunds)]
		ch.mu.Unlock()
	}

	var page []*refund // oldest first
	hasMore := false
	switch {
	case after != "":
		anchor := s.refundByID(after)
		if anchor == nil {
			return missing("refund", "starting_after", after)
		}
		end := sort.Search(len(scope), func(i int) bool { return scope[i].seq >= anchor.seq })
		start := max(0, end-limit)
		page, hasMore = scope[start:end], start > 0
	case before != "":
		anchor := s.refundByID(before)
		if anchor == nil {
			return missing("refund", "ending_before", before)
		}
		start := sort.Search(len(scope), func(i int) bool { return scope[i].seq > anchor.seq })
		end := min(len(scope), start+limit)
		page, hasMore = scope[start:end], end < len(scope)
	default:
		start := max(0, len(scope)-limit)
		page, hasMore = scope[start:], start > 0
	}

	list := refundList{Object: "list", Data: make([]refundObject, len(page)), HasMore: hasMore, URL: "/v1/refunds"}
	for i, re := range page {
		list.Data[len(page)-1-i] = re.render(expand) // newest first
	}
	return found(list)
}

// refundObject is Stripe's refund object as stripe-go v76 decodes it.
type refundObject struct {
	ID                     string            `json:"id"`
	Object                 string            `json:"object"`
	Amount                 int64             `json:"amount"`
	BalanceTransaction     *string           `json:"balance_transaction"`
	Charge                 any               `json:"charge"` // id, or the charge object when expanded
	Created                int64             `json:"created"`
	Currency               string            `json:"currency"`
	FailureReason          string            `json:"failure_reason,omitempty"`
	Metadata               map[string]string `json:"metadata"`
	PaymentIntent          *string           `json:"payment_intent"`
	Reason                 *string           `json:"reason"`
	ReceiptNumber          *string           `json:"receipt_number"`
	SourceTransferReversal *string           `json:"source_transfer_reversal"`
	Status                 string            `json:"status"`
	TransferReversal       *string           `json:"transfer_reversal"`
}

// refundList is Stripe's list object of refunds.
type refundList struct {
	Object  string         `json:"object"`
	Data    []refundObject `json:"data"`
	HasMore bool           `json:"has_more"`
	URL     string         `json:"url"`
}

// render is the refund's object, the charge's under its lock.
func (re *refund) render(expandCharge bool) refundObject {
	if !expandCharge {
		return re.object(false)
	}
	re.ch.mu.Lock()
	defer re.ch.mu.Unlock()
	return re.object(true)
}

// object renders the refund; with expandCharge the caller holds re.ch.mu.
func (re *refund) object(expandCharge bool) refundObject {
	status := *re.status.Load()
	o := refundObject{
		ID: re.ID, Object: "refund", Amount: re.Amount, Charge: re.Charge, Created: re.Created,
		Currency: re.Currency, Metadata: re.Metadata, PaymentIntent: optional(re.PaymentIntent),
		Reason: optional(re.Reason), Status: status,
	}
	if o.Metadata == nil {
		o.Metadata = emptyMetadata
	}
	if status != StatusRequiresAction {
		txn := "txn_sim" + re.ID[len(refundPrefix):]
		o.BalanceTransaction = &txn
	}
	switch status {
	case StatusCanceled:
		o.FailureReason = "merchant_request"
	case StatusFailed:
		o.FailureReason = re.failureReason
	}
	if expandCharge {
		o.Charge = re.ch.object()
	}
	return o
}
