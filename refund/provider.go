package refund

// What the engine and audit ask of a provider's refund API, in refundkit's
// terms; each provider is a package under refund/provider.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/refundkit/refundkit/journal"
)

// Provider is a payment provider's refund API. Its errors are, or wrap, a
// *Failure saying what they mean; any other error counts as no answer.
type Provider interface {
	Facts() Facts
	// Create asks for the refund of it under the key of attempt
	// (IdempotencyKey), with metadata naming batch, item and attempt.
	Create(ctx context.Context, it *Item, attempt int) (Answer, error)
	// Find returns every refund of the payment, newest first, whoever made
	// it; ErrNoLookup when the provider cannot list them.
	Find(ctx context.Context, p Payment) ([]Refund, error)
	// Payment returns the payment's amount and currency, and a payment
	// intent's charges (so its two names are one payment); ErrNoLookup when
	// the provider cannot read payments.
	Payment(ctx context.Context, p Payment) (PaymentInfo, error)
	// Cancel cancels refund id, if the provider still can.
	Cancel(ctx context.Context, id string) (Refund, error)
	// Get returns refund id as the provider holds it now.
	Get(ctx context.Context, id string) (Refund, error)
}

// PaymentKeeper is a Provider whose Find reads the payment too (Stripe's
// charge with its refunds, PayPal's capture): Kept gives what it read,
// when that cannot have changed since, and sends nothing.
type PaymentKeeper interface {
	Kept(p Payment) (PaymentInfo, bool)
}

// Teller is a Provider that also reads what the provider told of its
// refunds by its own signed events, as the receiver kept them: Told gives
// refund id as they tell it, sending nothing. The engine takes it in place
// of a read only when it is an outcome (done or dead): of a refund still
// pending there, or told of by no event, it asks the provider.
type Teller interface {
	Told(ctx context.Context, id string) (r Refund, told bool, err error)
}

// AllTeller is a Provider whose kept events can be read whole: every
// refund they tell of, as Told would give each (audit checks them against
// the journals).
type AllTeller interface {
	AllTold(ctx context.Context) ([]Refund, error)
}

// PaymentInfo is a payment as the provider holds it.
type PaymentInfo struct {
	Amount   int64    // what was captured, in minor units: what refunds can add up to
	Currency string   // lower-case ISO code
	Charges  []string // a payment intent's charges; none for a charge, capture or psp_reference
	Kept     bool     // from the look-up's read before (PaymentKeeper): no request sent
}

// ErrNoLookup is Find's answer from a provider that cannot list a payment's
// refunds (the checkpoint alone is then trusted: Facts.KeyTTL), and
// Payment's from one that cannot read a payment (the plan's word is taken).
var ErrNoLookup = errors.New("the provider cannot look refunds up")

// Facts are what a provider promises, which the engine decides by.
type Facts struct {
	Name string // in messages ("Stripe")
	// KeyTTL is how long the provider keeps an idempotency key (0: for
	// ever): past it, a resend under the key could refund twice.
	KeyTTL time.Duration
	// LateOutcomes: an indeterminate answer may still complete (Stripe's
	// 500): a new key only in a later run, with Config.ResendAfter500.
	LateOutcomes bool
	// PartialLookup: Find lists only the refunds the provider has told of
	// (Adyen's notifications): finding none proves nothing.
	PartialLookup  bool
	AmountRequired bool   // no "refund the rest": amount and currency are required
	MaxBatchItem   int    // bounds len(batch)+len(item) (Adyen's reference); 0 is none
	LookupRequests int    // requests one Find sends (PayPal: 2); 0 is one
	LookupName     string // one Find in the summary, when not a refund list ("notification look-up")
	CheckAt        string // where a person sees the payment's refunds; "" is the provider itself
	Backoff        Backoff
	// Payments are the plan item fields naming what this provider refunds
	// ("charge", "payment_intent", "capture", "psp_reference"); none is any.
	Payments []string
}

// AfterIndeterminate says what a later run does with an item the provider
// answered with its own 500, as the engine decides it by these facts.
func (f *Facts) AfterIndeterminate() string {
	switch {
	case f.LateOutcomes:
		return fmt.Sprintf("a later run looks it up; it sends under a new key only with --resend-after-500 (%s may still complete the call while it repairs an incident)", f.Name)
	case !f.PartialLookup:
		return "a later run looks it up, and sends under a new key if it finds nothing"
	}
	// Finding nothing proves nothing: never a new key, the same one while
	// it is surely kept (keyKept).
	s := fmt.Sprintf("a later run adopts its refund once %[1]s has told of it; until then it sends it again under the same key, never a new one", f.Name)
	if f.KeyTTL == 0 {
		return s + fmt.Sprintf(", and %s answers for the first call", f.Name)
	}
	return s + fmt.Sprintf(", while %[1]s surely keeps that key (half of %[2]s from the first call, by the journal's clock), and %[1]s answers for the first call; past that it is left for a person, who checks the payment %[3]s", f.Name, keyLife(f.KeyTTL), f.checkWhere())
}

// checkWhere is where a person checks a payment's refunds (CheckAt).
func (f *Facts) checkWhere() string {
	if f.CheckAt != "" {
		return "in " + f.CheckAt
	}
	return "at " + f.Name
}

// keyLife says how long keys are kept, in days when it is whole days.
func keyLife(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		if n := d / (24 * time.Hour); n != 1 {
			return fmt.Sprintf("%d days", n)
		}
		return "1 day"
	}
	return d.String()
}

// Payment is what a refund is made on: a charge or payment intent (Stripe),
// a capture (PayPal), a pspReference (Adyen).
type Payment struct{ Charge, PaymentIntent, Capture, PSPReference string }

// ID is the payment's id, the charge's when both are named.
func (p Payment) ID() string { _, id := p.named(); return id }

func (p Payment) field() string { f, _ := p.named(); return f }

// named is the plan item field that names the payment, and its id.
func (p Payment) named() (field, id string) {
	switch {
	case p.Charge != "":
		return "charge", p.Charge
	case p.PaymentIntent != "":
		return "payment_intent", p.PaymentIntent
	case p.Capture != "":
		return "capture", p.Capture
	}
	return "psp_reference", p.PSPReference
}

// accepts says why the provider cannot refund the item's payment, if so.
func (f *Facts) accepts(it *Item) *InputError {
	field := paymentOf(it).field()
	switch {
	case len(f.Payments) > 0 && !slices.Contains(f.Payments, field):
		return fieldError(field, "%s refunds a %s, not a %s: is this the plan for another provider (--provider)?", f.Name, strings.Join(f.Payments, " or "), field)
	case f.AmountRequired && it.Amount <= 0:
		return fieldError("amount", "%s needs the amount of every refund (it has no \"refund the rest\"): give amount and currency", f.Name)
	case f.AmountRequired && it.Currency == "":
		return fieldError("currency", "%s needs the currency of every refund: give it", f.Name)
	case f.MaxBatchItem > 0 && len(it.Batch)+len(it.Item) > f.MaxBatchItem:
		return fieldError("item", "%s names batch and item in a field of limited size: batch %q and item %q are %d characters together, want at most %d (a shorter item id, or batch name)", f.Name, it.Batch, it.Item, len(it.Batch)+len(it.Item), f.MaxBatchItem)
	}
	return nil
}

func paymentOf(it *Item) Payment {
	return Payment{Charge: it.Charge, PaymentIntent: it.PaymentIntent, Capture: it.Capture, PSPReference: it.PSPReference}
}

// Refund statuses, in Stripe's words, which journals and findings use; a
// provider maps its own onto them and passes on one it does not know as it
// came (journal.Statuses is the one allow-list).
const (
	RefundSucceeded      = journal.SucceededStatus
	RefundPending        = journal.PendingStatus
	RefundRequiresAction = journal.RequiresActionStatus // waits for the customer; can still be canceled
	RefundCanceled       = journal.CanceledStatus
	RefundFailed         = journal.FailedStatus
)

// Refund is a refund as a provider holds it.
type Refund struct {
	ID                                           string
	Charge, PaymentIntent, Capture, PSPReference string // the payment refunded, as said
	Amount                                       int64  // minor units
	Currency                                     string // lower-case ISO code
	Status                                       string // RefundSucceeded...
	FailureReason                                string // why a failed refund failed, or whose an Unattributed one cannot be told, when said
	Created                                      int64  // Unix seconds
	// Unattributed: whose cannot be told (PayPal); it may be refundkit's
	// own, so it holds the item as another batch's refund does.
	Unattributed bool
	Metadata     map[string]string // refundkit's keys (MetaBatch...) and the plan item's own
}

// The FailureReason of a told refund (pending) whose provider's signed
// events disagree among themselves: which is right cannot be told from
// them, so they settle nothing and audit reports the refund.
const (
	ReasonEventsContradict        = "events_contradict"        // Stripe's, PayPal's events
	ReasonNotificationsContradict = "notifications_contradict" // Adyen's notifications
)

// Contradicted reports a told refund whose signed events disagree.
func Contradicted(r *Refund) bool {
	return r.FailureReason == ReasonEventsContradict || r.FailureReason == ReasonNotificationsContradict
}

// Answer is a create call's answer.
type Answer struct {
	Refund
	Replayed   bool // the provider replayed the answer saved under the key
	HTTPStatus int  // the answer's status, 0 when not known
}

// Live reports a refund that may hold or move money: any not known to have
// ended without moving it (failed, canceled).
func Live(r *Refund) bool { return !journal.DeadStatus(r.Status) }

// Standing reports a refund known to hold or move money (succeeded, or not
// finished): only such a refund is credited to an item in place of another.
func Standing(r *Refund) bool {
	o := journal.OutcomeOf(r.Status)
	return o == journal.OutcomeDone || o == journal.OutcomeMoving
}

// Matches reports whether r was made by refundkit for item of batch.
func Matches(r *Refund, batch, item string) bool {
	return r.Metadata[MetaBatch] == batch && r.Metadata[MetaItem] == item
}

// NoAnswer is a call that got no answer at all: the same call again.
func NoAnswer(err error) *Failure {
	return &Failure{Class: ClassRetry, Code: "network_error", Message: err.Error(), Err: err}
}

// Unreadable is a success status whose body is not the provider's answer
// (a proxy's page): no answer either. name is the provider's, lower-case.
func Unreadable(name string, status int, err error) *Failure {
	f := NoAnswer(fmt.Errorf("%s: %d answer not understood: %w", name, status, err))
	f.Code = "unreadable_answer"
	return f
}

// RefusedHere is a request refundkit cannot send as it stands: final, and
// nothing was sent.
func RefusedHere(code string, err error) *Failure {
	return &Failure{Class: ClassFinal, Code: code, Message: err.Error(), Err: err}
}

// Class is what a failed call means for the item and the run.
type Class int

const (
	ClassRetry         Class = iota // nothing saved under the key, or no answer: the same call again
	ClassIndeterminate              // an error saved under the key, a refund maybe: in doubt, the key burned
	ClassFinal                      // refused for good
	ClassFatal                      // the credentials are refused: the run halts
	ClassKeyReused                  // another request, with other parameters, holds the key
	ClassStopped                    // the run was stopped (a signal) before an answer
	ClassInDoubt                    // no answer, maybe called (a command killed): in doubt, key not burned
)

// Failure is a provider's error with its meaning. Providers build it; the
// engine and audit only read it.
type Failure struct {
	Class Class
	// Status is the HTTP status of the provider's own answer; 0 when none
	// (a network error, a gateway in front of it answered).
	Status  int
	Code    string // the provider's error code, or a short cause ("gateway_502")
	Message string // the provider's own words, for people
	// RateLimited: refused for its rate; the pacer slows the account's
	// budget when AccountLimit, else the endpoint's.
	RateLimited, AccountLimit bool
	Err                       error
}

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// Classify says what err, from a Provider, means: a stop is ClassStopped,
// an error without a *Failure no answer.
func Classify(err error) Failure {
	if errors.Is(err, context.Canceled) {
		return Failure{Class: ClassStopped, Code: "interrupted", Message: err.Error(), Err: err}
	}
	var f *Failure
	if errors.As(err, &f) {
		return *f
	}
	return *NoAnswer(err)
}
