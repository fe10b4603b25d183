package notes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

// The tables of refund/checkpoint/postgres's migration 5.
const (
	refundsTable = "refundkit.adyen_notifications"
	othersTable  = "refundkit.adyen_other_notifications"
)

// PG is a Store in a table of the PostgreSQL checkpoint's database, that
// many receivers may add to at once: the dedup key is the primary key, and
// an insert meeting a row still being inserted waits for its commit.
type PG struct {
	pool   *pgxpool.Pool
	keys   [][]byte
	table  string
	url    string // redacted
	secret string // the password, scrubbed from every error
}

// OpenPG opens the store of refund events at url (as refund --journal
// takes it), migrating refundkit's schema first. Rows must verify under one of keys.
func OpenPG(ctx context.Context, url string, keys [][]byte) (*PG, error) {
	return openPG(ctx, url, keys, refundsTable)
}

// OpenPGOthers opens the store of the other events, beside OpenPG's.
func OpenPGOthers(ctx context.Context, url string, keys [][]byte) (*PG, error) {
	return openPG(ctx, url, keys, othersTable)
}

func openPG(ctx context.Context, url string, keys [][]byte, table string) (*PG, error) {
	if wire.NoKey(keys) {
		return nil, errors.New("adyen notifications in postgres: no HMAC key")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, &postgres.ConfigError{URL: postgres.Redact(url), Err: errors.New("does not parse")}
	}
	p := &PG{keys: keys, table: table, url: postgres.Redact(url), secret: cfg.ConnConfig.Password}
	// Add answers only once the commit is durable: synchronous_commit = off
	// could lose a row after Adyen was told [accepted].
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	cfg.ConnConfig.RuntimeParams["application_name"] = "refundkit-adyen-webhook"
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

func (p *PG) wrap(op string, err error) error {
	msg := err.Error()
	if p.secret != "" && strings.Contains(msg, p.secret) {
		err = errors.New(strings.ReplaceAll(msg, p.secret, "xxxxx"))
	}
	return fmt.Errorf("adyen notifications in %s (%s): %s: %w", p.table, p.url, op, err)
}

// Add returns once its insert, or the row it met, is committed.
func (p *PG) Add(ctx context.Context, n wire.Notification) (bool, error) {
	if why := check(&n, p.keys); why != "" {
		return false, &InvalidError{Noun: "notification", Reason: why}
	}
	doc, err := json.Marshal(n)
	if err != nil {
		return false, &InvalidError{Noun: "notification", Reason: err.Error()}
	}
	it := &n.Item
	tag, err := p.pool.Exec(ctx, `INSERT INTO `+p.table+` (dedup_key, psp_reference, original_reference, event_code, received_at, doc)
		VALUES ($1, $2, $3, $4, $5, $6::jsonb) ON CONFLICT (dedup_key) DO NOTHING`,
		wire.DedupKey(it), it.PSPReference, it.OriginalReference, it.EventCode, n.Received, string(doc))
	if err != nil {
		return false, p.wrap("add", err)
	}
	return tag.RowsAffected() == 1, nil
}

func (p *PG) ForRefund(ctx context.Context, psp string) ([]wire.Notification, error) {
	return p.query(ctx, `WHERE psp_reference = $1`, psp)
}

func (p *PG) ForPayment(ctx context.Context, psp string) ([]wire.Notification, error) {
	return p.query(ctx, `WHERE original_reference = $1`, psp)
}

func (p *PG) All(ctx context.Context) ([]wire.Notification, error) {
	return p.query(ctx, ``)
}

// query verifies each row: its doc, and its columns against the doc (an
// UPDATE that moved a row is refused like a forgery).
func (p *PG) query(ctx context.Context, where string, args ...any) ([]wire.Notification, error) {
	rows, err := p.pool.Query(ctx, `SELECT seq, dedup_key, psp_reference, original_reference, event_code, doc::text FROM `+p.table+` `+where+` ORDER BY seq`, args...)
	if err != nil {
		return nil, p.wrap("read", err)
	}
	defer rows.Close()
	var out []wire.Notification
	for rows.Next() {
		var (
			seq                 int64
			dk, psp, orig, code string
			doc                 string
			n                   wire.Notification
		)
		if err := rows.Scan(&seq, &dk, &psp, &orig, &code, &doc); err != nil {
			return nil, p.wrap("read", err)
		}
		why := decode([]byte(doc), p.keys, &n)
		if why == "" {
			switch it := &n.Item; {
			case dk != wire.DedupKey(it):
				why = fmt.Sprintf("dedup_key %q is not the notification's %q", dk, wire.DedupKey(it))
			case psp != it.PSPReference, orig != it.OriginalReference, code != it.EventCode:
				why = fmt.Sprintf("columns (psp_reference %q, original_reference %q, event_code %q) are not the notification's (%s)", psp, orig, code, describe(it))
			}
		}
		if why != "" {
			return nil, &CorruptError{Where: p.table, Line: seq, Reason: why}
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, p.wrap("read", err)
	}
	return out, nil
}

func (p *PG) Close() error {
	p.pool.Close()
	return nil
}
