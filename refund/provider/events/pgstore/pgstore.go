package pgstore

// Package pgstore keeps webhook deliveries in a table of the PostgreSQL
// checkpoint's database (an events.Table, under a provider's
// events.Codec), that many receivers behind one balancer add to at once:
// the dedup key is the primary key, and an insert meeting a row still
// being inserted waits for its commit, so a retry is kept once and
// answered only once durable. Apart from package events so that a
// provider's package need not import the checkpoint it is tested with.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/provider/events"
)

// Store is deliveries in an events.Table, checked with a Codec as an events.File is.
type Store[N any] struct {
	pool   *pgxpool.Pool
	codec  *events.Codec[N]
	t      *events.Table[N]
	url    string // redacted
	secret string // the password, scrubbed from every error
}

// Open opens t at url (as refund --journal takes it), migrating
// refundkit's schema first.
func Open[N any](ctx context.Context, url string, c *events.Codec[N], t *events.Table[N]) (*Store[N], error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, &postgres.ConfigError{URL: postgres.Redact(url), Err: errors.New("does not parse")}
	}
	p := &Store[N]{codec: c, t: t, url: postgres.Redact(url), secret: cfg.ConnConfig.Password}
	// Add answers only once the commit is durable: synchronous_commit = off
	// could lose a row after the provider was told it was kept.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	cfg.ConnConfig.RuntimeParams["application_name"] = t.App
	cfg.MaxConns = 8
	if err := postgres.Migrate(ctx, url); err != nil {
		return nil, err
	}
	p.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, p.wrap("connect", err)
	}
	if err := p.pool.Ping(ctx); err != nil {
		p.pool.Close()
		return nil, p.wrap("connect", err)
	}
	return p, nil
}

func (p *Store[N]) wrap(op string, err error) error {
	msg := err.Error()
	if p.secret != "" && strings.Contains(msg, p.secret) {
		err = errors.New(strings.ReplaceAll(msg, p.secret, "xxxxx"))
	}
	return fmt.Errorf("%s in %s (%s): %s: %w", p.t.What, p.t.Name, p.url, op, err)
}

// Add returns once its insert, or the row it met, is committed: added is
// false for a delivery kept already. One that does not verify is refused
// (*events.InvalidError).
func (p *Store[N]) Add(ctx context.Context, n N) (bool, error) {
	doc, err := p.codec.Encode(&n)
	if err != nil {
		return false, err
	}
	refund, payment := p.codec.Refs(&n)
	t := p.t
	tag, err := p.pool.Exec(ctx, `INSERT INTO `+t.Name+` (dedup_key, `+t.Refund+`, `+t.Payment+`, `+t.Kind+`, received_at, doc)
		VALUES ($1, $2, $3, $4, $5, $6::jsonb) ON CONFLICT (dedup_key) DO NOTHING`,
		t.Key(&n), refund, payment, t.KindOf(&n), t.Received(&n), string(doc))
	if err != nil {
		return false, p.wrap("add", err)
	}
	return tag.RowsAffected() == 1, nil
}

// ForRefund returns the deliveries of refund id, in the order received.
func (p *Store[N]) ForRefund(ctx context.Context, id string) ([]N, error) {
	return p.query(ctx, `WHERE `+p.t.Refund+` = $1`, id)
}

// ForPayment returns the deliveries that name payment id.
func (p *Store[N]) ForPayment(ctx context.Context, id string) ([]N, error) {
	return p.query(ctx, `WHERE `+p.t.Payment+` = $1`, id)
}

func (p *Store[N]) All(ctx context.Context) ([]N, error) { return p.query(ctx, ``) }

// query verifies each row: its doc, and its columns against the doc (an
// UPDATE that moved a row is refused like a forgery).
func (p *Store[N]) query(ctx context.Context, where string, args ...any) ([]N, error) {
	t := p.t
	rows, err := p.pool.Query(ctx, `SELECT seq, dedup_key, `+t.Refund+`, `+t.Payment+`, `+t.Kind+`, doc::text FROM `+t.Name+` `+where+` ORDER BY seq`, args...)
	if err != nil {
		return nil, p.wrap("read", err)
	}
	defer rows.Close()
	var out []N
	for rows.Next() {
		var (
			seq                        int64
			key, refund, payment, kind string
			doc                        string
		)
		if err := rows.Scan(&seq, &key, &refund, &payment, &kind, &doc); err != nil {
			return nil, p.wrap("read", err)
		}
		n, why := events.Decode([]byte(doc), p.codec)
		if why == "" {
			r, pay := p.codec.Refs(&n)
			switch {
			case key != t.Key(&n):
				why = fmt.Sprintf("dedup_key %q is not the %s's %q", key, p.codec.Noun, t.Key(&n))
			case refund != r, payment != pay, kind != t.KindOf(&n):
				why = fmt.Sprintf("columns (%s %q, %s %q, %s %q) are not the %s's (%s)",
					t.Refund, refund, t.Payment, payment, t.Kind, kind, p.codec.Noun, t.Describe(&n))
			}
		}
		if why != "" {
			return nil, &events.CorruptError{Where: t.Name, Line: seq, Reason: why}
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, p.wrap("read", err)
	}
	return out, nil
}

func (p *Store[N]) Close() error {
	p.pool.Close()
	return nil
}
