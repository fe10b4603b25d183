package stripesim

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/refund/sim"
)

// createParams are what the simulator acts on of POST /v1/refunds.
type createParams struct {
	charge, intent       string
	hasCharge, hasIntent bool
	amount               int64 // 0: the charge's remaining amount
	amountText           string
	hasAmount            bool
	reason               string
	hasReason            bool
	metadata             map[string]string
	expandCharge         bool
	badExpand            string
	badMetadata          bool
	unknown              string
}

// ignoredCreateParams are accepted and not acted on.
var ignoredCreateParams = map[string]bool{
	"currency": true, "customer": true, "instructions_email": true, "origin": true,
	"refund_application_fee": true, "reverse_transfer": true,
}

// parseCreate reads the form of POST /v1/refunds; validate judges it.
func parseCreate(form url.Values) createParams {
	var p createParams
	for name, vals := range form {
		v := vals[len(vals)-1]
		switch {
		case name == "charge":
			p.charge, p.hasCharge = v, true
		case name == "payment_intent":
			p.intent, p.hasIntent = v, true
		case name == "amount":
			p.amountText, p.hasAmount = v, true
		case name == "reason":
			p.reason, p.hasReason = v, true
		case strings.HasPrefix(name, "metadata[") && strings.HasSuffix(name, "]"):
			k := name[len("metadata[") : len(name)-1]
			if v == "" {
				continue // an empty value unsets a key
			}
			if p.metadata == nil {
				p.metadata = make(map[string]string, 4)
			}
			p.metadata[k] = v
		case name == "metadata":
			p.badMetadata = p.badMetadata || v != "" // metadata= unsets all keys
		case isArrayParam(name, "expand"):
			for _, e := range vals {
				if e == "charge" {
					p.expandCharge = true
				} else if p.badExpand == "" || e < p.badExpand {
					p.badExpand = e
				}
			}
		case ignoredCreateParams[name]:
		default:
			if p.unknown == "" || name < p.unknown { // the same one every time
				p.unknown = name
			}
		}
	}
	return p
}

// validate checks the parameters as Stripe does before the endpoint runs.
func (p *createParams) validate() (sim.Answer, bool) {
	switch {
	case p.unknown != "":
		return invalid("parameter_unknown", p.unknown, "Received unknown parameter: %s", p.unknown), false
	case p.hasCharge && p.charge == "":
		return invalid("parameter_invalid_empty", "charge", "You passed an empty string for 'charge'. We assume empty values are an attempt to unset a parameter; however 'charge' cannot be unset. You should remove 'charge' from your request or supply a non-empty value."), false
	case p.hasIntent && p.intent == "":
		return invalid("parameter_invalid_empty", "payment_intent", "You passed an empty string for 'payment_intent'. We assume empty values are an attempt to unset a parameter; however 'payment_intent' cannot be unset. You should remove 'payment_intent' from your request or supply a non-empty value."), false
	case p.hasCharge && p.hasIntent:
		return invalid("", "payment_intent", "You cannot specify both a charge and a payment_intent. Please specify one or the other."), false
	case !p.hasCharge && !p.hasIntent:
		return invalid("parameter_missing", "charge", "One of the following params should be provided for this request: charge or payment_intent."), false
	}
	if p.hasAmount {
		n, err := strconv.ParseInt(p.amountText, 10, 64)
		if err != nil {
			return invalid("parameter_invalid_integer", "amount", "Invalid integer: %s", p.amountText), false
		}
		if n <= 0 {
			return invalid("parameter_invalid_integer", "amount", "This value must be greater than or equal to 1."), false
		}
		p.amount = n
	}
	if p.hasReason {
		if p.reason == "" {
			return invalid("parameter_invalid_empty", "reason", "You passed an empty string for 'reason'. We assume empty values are an attempt to unset a parameter; however 'reason' cannot be unset. You should remove 'reason' from your request or supply a non-empty value."), false
		}
		if !slices.Contains(reasons, p.reason) {
			return invalid("", "reason", "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer"), false
		}
	}
	if p.badMetadata {
		return invalid("", "metadata", "Invalid object"), false
	}
	if msg := checkMetadata(p.metadata); msg != "" {
		return invalid("", "metadata", "Invalid metadata: %s", msg), false
	}
	if p.badExpand != "" {
		return invalid("", "expand", "This property cannot be expanded (%s).", p.badExpand), false
	}
	return sim.Answer{}, true
}

// createRefund is POST /v1/refunds after the idempotency layer.
func (s *Server) createRefund(c apiCall) sim.Answer {
	s.hook.Call(c.key)
	f, seq := c.f, c.seq
	p := parseCreate(c.form)
	if a, ok := p.validate(); !ok {
		return a
	}
	ch, a, ok := s.target(p.charge, p.intent)
	if !ok {
		return s.core.Refused(a)
	}
	if s.core.FailBeforeCommit(f, seq) {
		return internalError
	}
	status := StatusSucceeded
	switch {
	case s.core.Hit(f.RequiresActionShare, seq, sim.KnobRequiresAction):
		status = StatusRequiresAction
	case s.core.Hit(f.StripePendingShare, seq, sim.KnobStripePending):
		status = StatusPending
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	remaining := ch.Amount - ch.AmountRefunded
	if remaining == 0 {
		return s.core.Refused(refused(http.StatusBadRequest, sim.Error{Type: typeInvalid, Code: "charge_already_refunded", Charge: ch.ID,
			Message: fmt.Sprintf("Charge %s has already been refunded.", ch.ID)}))
	}
	amount := cmp.Or(p.amount, remaining)
	if amount > remaining {
		return s.core.Refused(refused(http.StatusBadRequest, sim.Error{Type: typeInvalid, Code: "amount_too_large", Param: "amount",
			Message: fmt.Sprintf("Refund amount (%s) is greater than unrefunded amount on charge (%s)", money(amount, ch.Currency), money(remaining, ch.Currency))}))
	}
	re := s.addRefund(ch, amount, status, p.reason, p.metadata, c.key)
	if status == StatusPending {
		s.madePending(re, f, seq)
	}
	if s.events != nil {
		reqID := sim.Padded("req_sim", 10, int(seq)) // serveAPI's
		s.events.send(f, EventRefundCreated, re.object(false), nil, eventRequest{ID: &reqID, IdempotencyKey: optional(c.key)}, s.now(), nil)
	}
	a = sim.Answer{Status: http.StatusOK, Body: sim.MustJSON(re.object(p.expandCharge)), Save: true}
	return s.core.AfterCommit(f, seq, a, internalError)
}

// money formats minor units of a two-decimal currency ("12.00 usd").
func money(minor int64, currency string) string {
	return fmt.Sprintf("%d.%02d %s", minor/100, minor%100, currency)
}
