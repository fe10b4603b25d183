package exec

// What a command's run means: its exit status and its answer on stdout,
// read as the contract says (docs/providers.md, "Any refund API"), and classified in
// the engine's terms.

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

// classNoAnswer is a create run that gave no answer to stand by (another
// exit status, a signal, a timeout, an answer not understood): the call
// may have been made, so the item stays in doubt, is not run again in this
// run, and a later run looks it up first; its key is not burned, so it is
// the key sent next.
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

// itemJSON is the plan line of it, as the create command reads it.
func itemJSON(it *refund.Item) ([]byte, error) {
	b, err := json.Marshal(it)
	return append(b, '\n'), err
}

// paymentJSON is the payment the find command lists, in a plan line's
// field names.
func paymentJSON(p refund.Payment) ([]byte, error) {
	b, err := json.Marshal(struct {
		Charge        string `json:"charge,omitempty"`
		PaymentIntent string `json:"payment_intent,omitempty"`
		Capture       string `json:"capture,omitempty"`
		PSPReference  string `json:"psp_reference,omitempty"`
	}{p.Charge, p.PaymentIntent, p.Capture, p.PSPReference})
	return append(b, '\n'), err
}

// createAnswer classifies a create run for attempt of it.
func createAnswer(it *refund.Item, attempt int, o outcome) (refund.Answer, error) {
	switch {
	case o.startErr != nil:
		// Nothing ran, so nothing was sent: the same call again, as for a
		// request that never left (the engine halts when none starts).
		return refund.Answer{}, failure(refund.ClassRetry, 0, "exec_not_started", o.describe())
	case o.timedOut:
		return refund.Answer{}, failure(classNoAnswer, 0, "exec_timeout", o.describe())
	case o.signal != "":
		return refund.Answer{}, failure(classNoAnswer, 0, "exec_signal", o.describe())
	case o.exit == exitTempFail:
		return refund.Answer{}, tempFail(o)
	case o.exit == exitNoPerm:
		return refund.Answer{}, noPerm(o)
	case o.exit != exitAnswered:
		return refund.Answer{}, failure(classNoAnswer, 0, "exec_exit_"+strconv.Itoa(o.exit), o.describe()+": in doubt")
	}
	a, err := parseAnswer(o)
	if err != nil {
		return refund.Answer{}, failure(classNoAnswer, 0, "exec_bad_answer", err.Error()+": in doubt")
	}
	if a.Status == refund.RefundFailed {
		msg := a.Message
		if msg == "" {
			msg = "refused: " + a.Code
		}
		return refund.Answer{}, failure(refund.ClassFinal, 0, a.Code, msg)
	}
	amount, _ := minorUnits(a.Amount)
	r := refund.Refund{ID: a.ID, Status: a.Status, Amount: amount, Currency: strings.ToLower(a.Currency),
		Charge: it.Charge, PaymentIntent: it.PaymentIntent, Capture: it.Capture, PSPReference: it.PSPReference,
		// The command was told these, and the contract makes it the one
		// that files them where find reads them back.
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
	switch {
	case o.startErr != nil:
		return nil, failure(refund.ClassRetry, 0, "exec_not_started", o.describe())
	case o.exit == exitTempFail:
		return nil, tempFail(o)
	case o.exit == exitNoPerm:
		return nil, noPerm(o)
	case o.timedOut || o.signal != "" || o.exit != exitAnswered:
		// A look-up changes nothing: the engine may run it again.
		return nil, failure(refund.ClassIndeterminate, 0, "exec_find_failed", o.describe())
	case o.overflow:
		return nil, failure(refund.ClassIndeterminate, 0, "exec_bad_answer", fmt.Sprintf("%s printed more than %d bytes", o.what, maxFindOutput))
	}
	var out []refund.Refund
	for n, line := range bytes.Split(o.stdout, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		r, err := parseListed(p, line)
		if err != nil {
			return nil, failure(refund.ClassIndeterminate, 0, "exec_bad_answer", fmt.Sprintf("%s: line %d: %v", o.what, n+1, err))
		}
		out = append(out, r)
	}
	// Newest first, as the engine expects; lines the command gave in the
	// same second (or without created) keep its order.
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
		Charge: or(l.Charge, p.Charge), PaymentIntent: or(l.PaymentIntent, p.PaymentIntent), Capture: or(l.Capture, p.Capture),
		PSPReference: or(l.PSPReference, p.PSPReference)}
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

// attemptOf reads an attempt: a positive integer, or a string of one (as
// metadata often holds it); "" when absent.
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

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// tempFail is an exit 75: the same call again after a backoff. The pacer
// halves the run's --rate as for a 429. Status 0 counts it as no answer
// from the API: Config.MaxUnanswered of them in a row, with no other
// answer between, halt the run (exit 6) instead of retrying for ever a
// command that cannot reach its API.
func tempFail(o outcome) *refund.Failure {
	f := failure(refund.ClassRetry, 0, "exec_tempfail", o.describe()+" (retry later with the same key)")
	f.RateLimited, f.AccountLimit = true, true
	return f
}

// noPerm is a run that says the API refused its credentials: no call of
// the run can succeed, and it halts (exit 6).
func noPerm(o outcome) *refund.Failure {
	return failure(refund.ClassFatal, 0, "exec_credentials_refused", o.describe()+" (the API refused the credentials)")
}

// failure builds the engine's failure.
func failure(c refund.Class, status int, code, msg string) *refund.Failure {
	return &refund.Failure{Class: c, Status: status, Code: code, Message: msg, Err: errors.New(msg)}
}
