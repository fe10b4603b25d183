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

// The tables of refund/checkpoint/postgres's migration 5: refund events, and the
// others, kept apart.
const (
	refundsTable = "refundkit.adyen_notifications"
	othersTable  = "refundkit.adyen_other_notifications"
)

// PG is a Store in a table of the PostgreSQL checkpoint's database. Many
// receivers (behind one load balancer) may add to it at once: the dedup
// key is the table's primary key, and an insert that meets a row of its
// key still being inserted by another waits for that commit, so a
// duplicate is reported only once the first is committed.
type PG struct {
	pool   *pgxpool.Pool
	key    []byte
	table  string
	url    string // redacted
	secret string // the password, scrubbed from every error
}

// OpenPG opens the store of refund events in the database at url
// (postgres:// or postgresql://, as refund --journal takes it; PG*
// environment variables fill in what it leaves out), creating or migrating
// refundkit's schema first (postgres.Migrate). Rows must verify under key.
func OpenPG(ctx context.Context, url string, key []byte) (*PG, error) {
	return openPG(ctx, url, key, refundsTable)
}

// OpenPGOthers opens the store of the other events, in a table of its own
// beside OpenPG's.
func OpenPGOthers(ctx context.Context, url string, key []byte) (*PG, error) {
	return openPG(ctx, url, key, othersTable)
}

func openPG(ctx context.Context, url string, key []byte, table string) (*PG, error) {
	if len(key) == 0 {
		return nil, errors.New("adyen notifications in postgres: no HMAC key")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, &postgres.ConfigError{URL: postgres.Redact(url), Err: errors.New("does not parse")}
	}
	p := &PG{key: key, table: table, url: postgres.Redact(url), secret: cfg.ConnConfig.Password}
	// Add answers only after the commit is durable: a database, role or
	// server set to synchronous_commit = off would acknowledge a commit
	// that a crash of the server can still lose, after Adyen was told
	// [accepted] and stopped retrying. "on" waits for the local WAL flush
	// (and for synchronous standbys, if the server names any).
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

// wrap says what failed, without the password.
func (p *PG) wrap(op string, err error) error {
	msg := err.Error()
	if p.secret != "" && strings.Contains(msg, p.secret) {
		err = errors.New(strings.ReplaceAll(msg, p.secret, "xxxxx"))
	}
	return fmt.Errorf("adyen notifications in %s (%s): %s: %w", p.table, p.url, op, err)
}

// Add inserts n unless a row of its dedup key is there; it returns once
// the insert is committed (or the row it met is).
func (p *PG) Add(ctx context.Context, n wire.Notification) (bool, error) {
	if why := check(&n, p.key); why != "" {
		return false, &InvalidError{Reason: why}
	}
	doc, err := json.Marshal(n)
	if err != nil {
		return false, &InvalidError{Reason: err.Error()}
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

// ForRefund returns the rows whose pspReference is psp, in seq order.
func (p *PG) ForRefund(ctx context.Context, psp string) ([]wire.Notification, error) {
	return p.query(ctx, `WHERE psp_reference = $1`, psp)
}

// ForPayment returns the rows whose originalReference is psp.
func (p *PG) ForPayment(ctx context.Context, psp string) ([]wire.Notification, error) {
	return p.query(ctx, `WHERE original_reference = $1`, psp)
}

// All returns every row, in seq order.
func (p *PG) All(ctx context.Context) ([]wire.Notification, error) {
	return p.query(ctx, ``)
}

// query reads rows in seq order and verifies each: its doc, and its
// columns against the doc (a row moved to another refund by an UPDATE is
// refused like a forged one).
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
		why := decode([]byte(doc), p.key, &n)
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

// Close closes the pool.
func (p *PG) Close() error {
	p.pool.Close()
	return nil
}
