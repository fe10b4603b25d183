// Package exec is refundkit's provider for any refund API: refund.Provider
// over commands the user supplies, which make one refund call or list a
// payment's refunds and say what came of it by their exit status and JSON
// on stdout (docs/providers.md, "Any refund API").
package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/refundkit/refundkit/refund"
)

// Name names the provider in messages.
const Name = "exec"

// DefaultTimeout bounds one run of a command.
const DefaultTimeout = 30 * time.Second

// Config is what the provider runs.
type Config struct {
	Create  string        // the shell command run once per attempt
	Find    string        // lists a payment's refunds; "": refund.ErrNoLookup
	Timeout time.Duration // then the process group is killed (default DefaultTimeout)
	KeyTTL  time.Duration // how long the API keeps an idempotency key (0: for ever)
	// Stderr receives the commands' stderr, each line prefixed with Prefix,
	// command and payment ("refund: exec-create ch_1: ...").
	Stderr io.Writer
	Prefix string
}

// Provider runs the commands of a Config. It is safe for concurrent use.
type Provider struct {
	cfg   Config
	errMu sync.Mutex // one line at a time on Stderr
}

var _ refund.Provider = (*Provider)(nil)

// New returns the provider of cfg.
func New(cfg Config) (*Provider, error) {
	if cfg.Create == "" && cfg.Find == "" {
		return nil, errors.New("no create or find command")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.KeyTTL < 0 {
		return nil, fmt.Errorf("key TTL %v: want 0 (kept for ever) or more", cfg.KeyTTL)
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	return &Provider{cfg: cfg}, nil
}

// Facts: keys are kept as long as the user says, an unknown API may
// complete a call after any failure, and a run that exited 75 is repeated
// after a backoff.
func (p *Provider) Facts() refund.Facts {
	return refund.Facts{Name: Name, KeyTTL: p.cfg.KeyTTL, LateOutcomes: true,
		Backoff: refund.Backoff{Base: 500 * time.Millisecond, Max: 30 * time.Second}}
}

// Create runs the create command once for attempt of it.
func (p *Provider) Create(ctx context.Context, it *refund.Item, attempt int) (refund.Answer, error) {
	if p.cfg.Create == "" {
		return refund.Answer{}, failure(refund.ClassFatal, "exec_no_create", "no create command: this provider only lists refunds")
	}
	in, err := jsonLine(it)
	if err != nil {
		return refund.Answer{}, err
	}
	env := []string{
		"REFUNDKIT_IDEMPOTENCY_KEY=" + refund.IdempotencyKey(it.Batch, it.Item, attempt),
		"REFUNDKIT_BATCH=" + it.Batch,
		"REFUNDKIT_ITEM=" + it.Item,
		fmt.Sprintf("REFUNDKIT_ATTEMPT=%d", attempt),
		"REFUNDKIT_TARGET=" + it.Target(),
		fmt.Sprintf("REFUNDKIT_AMOUNT=%d", it.Amount),
		"REFUNDKIT_CURRENCY=" + it.Currency,
	}
	out := p.run(ctx, "exec-create", p.cfg.Create, it.Target(), in, env, maxCreateOutput)
	return createAnswer(it, attempt, out)
}

// Find runs the find command for payment pay.
func (p *Provider) Find(ctx context.Context, pay refund.Payment) ([]refund.Refund, error) {
	if p.cfg.Find == "" {
		return nil, refund.ErrNoLookup
	}
	in, err := jsonLine(paymentJSON{pay.Charge, pay.PaymentIntent, pay.Capture, pay.PSPReference})
	if err != nil {
		return nil, err
	}
	out := p.run(ctx, "exec-find", p.cfg.Find, pay.ID(), in, []string{"REFUNDKIT_TARGET=" + pay.ID()}, maxFindOutput)
	return findAnswer(pay, out)
}

// Payment: the contract has no command that reads a payment.
func (p *Provider) Payment(context.Context, refund.Payment) (refund.PaymentInfo, error) {
	return refund.PaymentInfo{}, refund.ErrNoLookup
}

// Cancel: the contract has no cancel command (audit reports the refund).
func (p *Provider) Cancel(_ context.Context, id string) (refund.Refund, error) {
	return refund.Refund{}, failure(refund.ClassFinal, "unsupported", fmt.Sprintf("refund %s: the exec provider has no cancel command", id))
}

// Get: the contract cannot read one refund. The error is final (a pending
// item stays pending) and wraps ErrNoLookup (the engine uses Find).
func (p *Provider) Get(_ context.Context, id string) (refund.Refund, error) {
	err := fmt.Errorf("refund %s: %w (the exec provider reads refunds only through --exec-find)", id, refund.ErrNoLookup)
	return refund.Refund{}, &refund.Failure{Class: refund.ClassFinal, Code: "no_get", Message: err.Error(), Err: err}
}
