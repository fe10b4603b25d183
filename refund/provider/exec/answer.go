package exec

// What a command's run means, as the contract says (docs/providers.md).

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/refund"
)

// classNoAnswer is a create run that gave no answer to stand by: the call
// may have been made, so the item stays in doubt under its key.
const classNoAnswer = refund.ClassInDoubt

// answer is the create command's answer object.
type answer struct {
	ID       string          `json:"id"`
	Status   string          `json:"status"`
	Amount   json.RawMessage `json:"amount"`
	Currency string          `json:"currency"`
	Code     string          `json:"code"`
	Message  string          `json:"message"`
}

// listed is one line of the find command's output.
type listed struct {
	ID            string          `json:"id"`
	Status        string          `json:"status"`
	Amount        json.RawMessage `json:"amount"`
	Currency      string          `json:"currency"`
	Batch         string          `json:"batch"`
	Item          string          `json:"item"`
	Attempt       json.RawMessage `json:"attempt"`
	Created       int64           `json:"created"`
	Charge        string          `json:"charge"`
	PaymentIntent string          `json:"payment_intent"`
	Capture       string          `json:"capture"`
	PSPReference  string          `json:"psp_reference"`
	FailureReason string          `json:"failure_reason"`
}

// jsonLine is v as a command reads it on stdin: one line of JSON.
func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}

// paymentJSON is the payment the find command lists, as a plan line names it.
type paymentJSON struct {
	Charge        string `json:"charge,omitempty"`
	PaymentIntent string `json:"payment_intent,omitempty"`
	Capture       string `json:"capture,omitempty"`
	PSPReference  string `json:"psp_reference,omitempty"`
}

// createAnswer classifies a create run for attempt of it.
func createAnswer(it *refund.Item, attempt int, o outcome) (refund.Answer, error) {
	if f := o.unanswered(); f != nil {
		return refund.Answer{}, f
	}
	switch {
	case o.timedOut:
		return refund.Answer{}, failure(classNoAnswer, "exec_timeout", o.describe())
	case o.signal != "":
		return refund.Answer{}, failure(classNoAnswer, "exec_signal", o.describe())
	case o.exit != exitAnswered:
		return refund.Answer{}, failure(classNoAnswer, "exec_exit_"+strconv.Itoa(o.exit), o.describe()+": in doubt")
	}
	a, err := parseAnswer(o)
	if err != nil {
		return refund.Answer{}, failure(classNoAnswer, "exec_bad_answer", err.Error()+": in doubt")
	}
	if a.Status == refund.RefundFailed {
		return refund.Answer{}, failure(refund.ClassFinal, a.Code, cmp.Or(a.Message, "refused: "+a.Code))
	}
	amount, _ := minorUnits(a.Amount)
	r := refund.Refund{ID: a.ID, Status: a.Status, Amount: amount, Currency: strings.ToLower(a.Currency),
		Charge: it.Charge, PaymentIntent: it.PaymentIntent, Capture: it.Capture, PSPReference: it.PSPReference,
		// The command was told these; the contract has find give them back.
		Metadata: map[string]string{refund.MetaBatch: it.Batch, refund.MetaItem: it.Item, refund.MetaAttempt: strconv.Itoa(attempt)}}
	return refund.Answer{Refund: r}, nil
}

// parseAnswer reads the one answer object of a create run that exited 0.
func parseAnswer(o outcome) (answer, error) {
	var a answer
	if o.overflow {
		return a, fmt.Errorf("%s printed more than %d bytes", o.what, maxCreateOutput)
	}
	dec := json.NewDecoder(bytes.NewReader(o.stdout))
	if err := dec.Decode(&a); err != nil {
		return a, fmt.Errorf("%s exited 0 without one JSON answer object on stdout: %v", o.what, err)
	}
	if len(bytes.TrimSpace(o.stdout[dec.InputOffset():])) > 0 {
		return a, fmt.Errorf("%s printed more than one JSON object on stdout", o.what)
	}
	bad := func(format string, args ...any) (answer, error) {
		return a, fmt.Errorf("%s answered %s", o.what, fmt.Sprintf(format, args...))
	}
	switch a.Status {
	case refund.RefundSucceeded, refund.RefundPending:
		if a.ID == "" {
			return bad("status %q without an id", a.Status)
		}
		if n, err := minorUnits(a.Amount); err != nil {
			return bad("status %q: amount: %v", a.Status, err)
		} else if n == 0 {
			return bad("status %q: amount 0: a refund that exists is of a positive amount", a.Status)
		}
	case refund.RefundFailed:
		if a.Code == "" {
			return bad(`status "failed" without a code`)
		}
	default:
		return bad("status %s: want succeeded, pending or failed", refund.Show(a.Status))
	}
	return a, nil
}

// findAnswer reads a find run's refunds of payment p, newest first.
func findAnswer(p refund.Payment, o outcome) ([]refund.Refund, error) {
	if f := o.unanswered(); f != nil {
		return nil, f
	}
	switch {
	case o.timedOut || o.signal != "" || o.exit != exitAnswered:
		// A look-up changes nothing: it may be run again.
		return nil, failure(refund.ClassIndeterminate, "exec_find_failed", o.describe())
	case o.overflow:
		return nil, failure(refund.ClassIndeterminate, "exec_bad_answer", fmt.Sprintf("%s printed more than %d bytes", o.what, maxFindOutput))
	}
	var out []refund.Refund
	for n, line := range bytes.Split(o.stdout, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		r, err := parseListed(p, line)
		if err != nil {
			return nil, failure(refund.ClassIndeterminate, "exec_bad_answer", fmt.Sprintf("%s: line %d: %v", o.what, n+1, err))
		}
		out = append(out, r)
	}
	// Newest first; lines of the same second keep their order.
	slices.SortStableFunc(out, func(a, b refund.Refund) int { return cmp.Compare(b.Created, a.Created) })
	return out, nil
}

// parseListed reads one refund of payment p from a find line.
func parseListed(p refund.Payment, line []byte) (refund.Refund, error) {
	var l listed
	if err := json.Unmarshal(line, &l); err != nil {
		return refund.Refund{}, err
	}
	amount, err := minorUnits(l.Amount)
	switch {
	case l.ID == "":
		return refund.Refund{}, errors.New("no id")
	case err != nil:
		return refund.Refund{}, fmt.Errorf("refund %s: amount: %v", refund.Show(l.ID), err)
	}
	switch l.Status {
	case refund.RefundSucceeded, refund.RefundPending, refund.RefundRequiresAction:
		if amount == 0 {
			return refund.Refund{}, fmt.Errorf("refund %s: status %s: amount 0: a refund that stands is of a positive amount", refund.Show(l.ID), l.Status)
		}
	case refund.RefundFailed, refund.RefundCanceled:
	default:
		return refund.Refund{}, fmt.Errorf("refund %s: status %s: want succeeded, pending, failed, canceled or requires_action", refund.Show(l.ID), refund.Show(l.Status))
	}
	r := refund.Refund{ID: l.ID, Status: l.Status, Amount: amount, Currency: strings.ToLower(l.Currency),
		Created: l.Created, FailureReason: l.FailureReason,
		Charge: cmp.Or(l.Charge, p.Charge), PaymentIntent: cmp.Or(l.PaymentIntent, p.PaymentIntent), Capture: cmp.Or(l.Capture, p.Capture),
		PSPReference: cmp.Or(l.PSPReference, p.PSPReference)}
	if l.Batch != "" || l.Item != "" {
		attempt, err := attemptOf(l.Attempt)
		if err != nil {
			return refund.Refund{}, fmt.Errorf("refund %s: attempt: %v", refund.Show(l.ID), err)
		}
		r.Metadata = map[string]string{refund.MetaBatch: l.Batch, refund.MetaItem: l.Item}
		if attempt != "" {
			r.Metadata[refund.MetaAttempt] = attempt
		}
	}
	return r, nil
}

// minorUnits reads an amount: a non-negative integer.
func minorUnits(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, errors.New("missing")
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: want an integer of minor units, 0 or more", refund.Show(string(raw)))
	}
	return n, nil
}

// attemptOf reads an attempt: a positive integer or a string of one ("": none).
func attemptOf(raw json.RawMessage) (string, error) {
	s := string(raw)
	if s == "" || s == "null" {
		return "", nil
	}
	if uq, err := strconv.Unquote(s); err == nil {
		s = uq
	}
	if n, err := strconv.Atoi(s); err != nil || n < 1 {
		return "", fmt.Errorf("%s: want a positive integer", refund.Show(string(raw)))
	}
	return s, nil
}

// unanswered is the failure of a run that gave no answer of the API's,
// create or find alike; nil for another. Nothing ran, or exit 75 (rate
// limited as a 429, no answer): the same call again; exit 77: the run
// halts.
func (o *outcome) unanswered() *refund.Failure {
	switch {
	case o.startErr != nil:
		return failure(refund.ClassRetry, "exec_not_started", o.describe())
	case o.exit == exitTempFail:
		f := failure(refund.ClassRetry, "exec_tempfail", o.describe()+" (retry later with the same key)")
		f.RateLimited, f.AccountLimit = true, true
		return f
	case o.exit == exitNoPerm:
		return failure(refund.ClassFatal, "exec_credentials_refused", o.describe()+" (the API refused the credentials)")
	}
	return nil
}

// failure builds the engine's failure of a run: never an HTTP status.
func failure(c refund.Class, code, msg string) *refund.Failure {
	return &refund.Failure{Class: c, Code: code, Message: msg, Err: errors.New(msg)}
}
