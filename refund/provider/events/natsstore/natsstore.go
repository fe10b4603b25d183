// Package natsstore keeps webhook deliveries in a key-value bucket of the
// NATS JetStream checkpoint's server, that many receivers add to at once.
// A delivery's key names its refund, its payment and its dedup key, so a
// create meeting the same key is the same delivery: the bucket keeps it
// once for good, not only within the stream's dedup window, and readers
// find a refund's or a payment's deliveries by a wildcard of the key.
package natsstore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/refund/provider/events"
)

// Store is deliveries in a bucket, checked with a Codec as an events.File
// is: every reader verifies each delivery again, and its key against it.
type Store[N any] struct {
	kv    jetstream.KeyValue
	codec *events.Codec[N]
	where string // the bucket in messages
	done  func() // ends the connection the store was opened over
}

// New keeps deliveries under c in kv (refund/checkpoint/natsjs's
// Checkpoint.Bucket opens it, checked as durable as the checkpoint); done,
// if not nil, is called by Close.
func New[N any](kv jetstream.KeyValue, c *events.Codec[N], done func()) *Store[N] {
	return &Store[N]{kv: kv, codec: c, where: "bucket " + kv.Bucket(), done: done}
}

// maxToken bounds a token: a key past the server's control line (4 KiB
// with the subject) would make the server close the connection for good.
const maxToken = 200

// token is s as one token of a key: never empty, in the key's alphabet;
// one too long is its SHA-256 (h...), as the same s always gives.
func token(s string) string {
	t := base64.RawURLEncoding.EncodeToString([]byte(s))
	if len(t) > maxToken {
		sum := sha256.Sum256([]byte(s))
		return "h" + base64.RawURLEncoding.EncodeToString(sum[:])
	}
	return "_" + t
}

// key is where n is kept: its refund, its payment and its dedup key.
func (s *Store[N]) key(n *N) string {
	refund, payment := s.codec.Refs(n)
	return token(refund) + "." + token(payment) + "." + token(s.codec.Key(n))
}

// Add returns once the server has stored n, or met a delivery of its
// dedup key stored already (added false): only then may the receiver
// answer 2xx. As a File, the first of one dedup key is kept, whatever
// the refund and payment the later ones name. One that does not verify
// is refused (*events.InvalidError).
func (s *Store[N]) Add(ctx context.Context, n N) (bool, error) {
	doc, err := s.codec.Encode(&n)
	if err != nil {
		return false, err
	}
	kept, err := s.entries(ctx, "*.*."+token(s.codec.Key(&n)), jetstream.MetaOnly())
	if err != nil {
		return false, fmt.Errorf("%s: add: %w", s.where, err)
	}
	if len(kept) > 0 {
		return false, nil
	}
	_, err = s.kv.Create(ctx, s.key(&n), doc)
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("%s: add: %w", s.where, err)
	}
	return true, nil
}

// ForRefund returns the deliveries of refund id, in the order received.
func (s *Store[N]) ForRefund(ctx context.Context, id string) ([]N, error) {
	return s.read(ctx, token(id)+".*.*")
}

// ForPayment returns the deliveries that name payment id, in the order received.
func (s *Store[N]) ForPayment(ctx context.Context, id string) ([]N, error) {
	return s.read(ctx, "*."+token(id)+".*")
}

// All returns every delivery, in the order received.
func (s *Store[N]) All(ctx context.Context) ([]N, error) { return s.read(ctx, ">") }

// read is the deliveries under the keys that match filter, each verified
// again and kept under its own key (a value put under another delivery's
// key, or edited, is refused as a forgery is), ordered by revision.
func (s *Store[N]) read(ctx context.Context, filter string) ([]N, error) {
	entries, err := s.entries(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("%s: read: %w", s.where, err)
	}
	slices.SortFunc(entries, func(a, b jetstream.KeyValueEntry) int { return cmp.Compare(a.Revision(), b.Revision()) })
	out := make([]N, 0, len(entries))
	// A later delivery of a dedup key read here is not kept (two receivers
	// raced past Add's look); a reader of its refund or payment alone
	// still finds it, as no provider sends two signed deliveries of one
	// key naming different payments.
	first := map[string]bool{}
	for _, e := range entries {
		dedup := e.Key()[strings.LastIndexByte(e.Key(), '.')+1:]
		if first[dedup] {
			continue
		}
		first[dedup] = true
		n, why := events.Decode(e.Value(), s.codec)
		if why == "" && s.key(&n) != e.Key() {
			why = fmt.Sprintf("kept under key %q, not its own", e.Key())
		}
		if why != "" {
			return nil, &events.CorruptError{Where: s.where, Line: int64(e.Revision()), Reason: why}
		}
		out = append(out, n)
	}
	return out, nil
}

// entries are the values stored under the keys that match filter when
// the call began.
func (s *Store[N]) entries(ctx context.Context, filter string, opts ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	w, err := s.kv.Watch(ctx, filter, append(opts, jetstream.IgnoreDeletes())...)
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var entries []jetstream.KeyValueEntry
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("the watch ended early")
			}
			if e == nil { // every value stored when the watch began is read
				return entries, nil
			}
			entries = append(entries, e)
		}
	}
}

// Close ends the store and the connection it was opened over.
func (s *Store[N]) Close() error {
	if s.done != nil {
		s.done()
	}
	return nil
}

var _ events.Store[struct{}] = (*Store[struct{}])(nil)
