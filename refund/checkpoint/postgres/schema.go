package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations are the schema's versions, in order: migration i brings the
// schema to version i+1.
var migrations = []string{
	// 1: batches, their plans' items with claims, records, workers.
	`CREATE TABLE refundkit.batches (
		batch       text PRIMARY KEY,
		plan_digest bytea NOT NULL,
		items       bigint NOT NULL,
		loaded_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
		loaded_by   text NOT NULL
	);
	CREATE TABLE refundkit.items (
		batch       text NOT NULL REFERENCES refundkit.batches,
		item        text NOT NULL,
		line        bigint NOT NULL,
		plan        text NOT NULL,
		status      text NOT NULL DEFAULT 'unknown',
		held        boolean NOT NULL DEFAULT false,
		claimed_by  text,
		claim_gen   bigint NOT NULL DEFAULT 0,
		lease_until timestamptz,
		PRIMARY KEY (batch, item)
	);
	CREATE INDEX items_open ON refundkit.items (batch, line) WHERE status NOT IN ('refunded', 'failed') OR held;
	CREATE INDEX items_claimed ON refundkit.items (claimed_by) WHERE claimed_by IS NOT NULL;
	CREATE SEQUENCE refundkit.commits;
	CREATE TABLE refundkit.records (
		seq       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		commit_id bigint NOT NULL,
		batch     text NOT NULL,
		item      text NOT NULL,
		claim_gen bigint NOT NULL,
		worker    text NOT NULL,
		rec       text NOT NULL
	);
	CREATE INDEX records_item ON refundkit.records (batch, item, seq);
	CREATE TABLE refundkit.workers (
		worker     text PRIMARY KEY,
		host       text NOT NULL,
		pid        integer NOT NULL,
		started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
		last_seen  timestamptz NOT NULL DEFAULT clock_timestamp(),
		stopped_at timestamptz
	);`,
	// 2: payment locks: two items of one payment are never sent at once.
	`CREATE TABLE refundkit.payment_locks (
		payment     text PRIMARY KEY,
		batch       text NOT NULL,
		item        text NOT NULL,
		worker      text NOT NULL,
		claim_gen   bigint NOT NULL,
		lease_until timestamptz NOT NULL
	);
	CREATE INDEX payment_locks_item ON refundkit.payment_locks (batch, item);`,
	// 3: records by the refund they credit: one item's ever (Holder).
	`CREATE INDEX records_refund ON refundkit.records ((rec::jsonb->>'refund')) WHERE rec::jsonb->>'type' = 'refunded';`,
	// 4: each record's transaction, to tell what a worker's start saw
	// committed (sequence numbers are drawn before commit, not in order).
	`ALTER TABLE refundkit.records ADD COLUMN xact xid8;
	ALTER TABLE refundkit.records ALTER COLUMN xact SET DEFAULT pg_current_xact_id();
	ALTER TABLE refundkit.workers ADD COLUMN batches text[];
	ALTER TABLE refundkit.items ADD COLUMN released_by text[] NOT NULL DEFAULT '{}';`,
	// 5: Adyen's notifications as adyen-webhook accepted them, one row per
	// dedup key so that receivers behind one balancer keep a retry once.
	`CREATE TABLE refundkit.adyen_notifications (
		seq                bigint GENERATED ALWAYS AS IDENTITY,
		dedup_key          text PRIMARY KEY,
		psp_reference      text NOT NULL,
		original_reference text NOT NULL,
		event_code         text NOT NULL,
		received_at        timestamptz NOT NULL,
		doc                jsonb NOT NULL
	);
	CREATE INDEX adyen_notifications_psp ON refundkit.adyen_notifications (psp_reference, seq);
	CREATE INDEX adyen_notifications_original ON refundkit.adyen_notifications (original_reference, seq);
	CREATE UNIQUE INDEX adyen_notifications_seq ON refundkit.adyen_notifications (seq);
	CREATE TABLE refundkit.adyen_other_notifications (LIKE refundkit.adyen_notifications INCLUDING ALL);`,
	// 6: the shared rate budget (budget.go): each worker's account, lease
	// (how stale its last_seen may be) and part of the account's limits.
	`ALTER TABLE refundkit.workers ADD COLUMN account text, ADD COLUMN lease interval, ADD COLUMN budget_share double precision;
	CREATE INDEX workers_account ON refundkit.workers (account) WHERE stopped_at IS NULL;`,
	// 7: the intents and refunds of each payment, of any batch, so that
	// another item's send holds this one (OnPayment) where a provider
	// cannot look the refund up (Adyen).
	`CREATE INDEX records_payment ON refundkit.records ((coalesce(rec::jsonb->>'charge', rec::jsonb->>'payment_intent', rec::jsonb->>'capture', rec::jsonb->>'psp_reference')))
		WHERE rec::jsonb->>'type' IN ('intent', 'refunded');`,
	// 8: Stripe's events as webhook --stripe accepted them, one row per
	// event id, so that receivers behind one balancer keep a retry once.
	`CREATE TABLE refundkit.stripe_events (
		seq         bigint GENERATED ALWAYS AS IDENTITY,
		dedup_key   text PRIMARY KEY,
		refund_id   text NOT NULL,
		payment_id  text NOT NULL,
		event_type  text NOT NULL,
		received_at timestamptz NOT NULL,
		doc         jsonb NOT NULL
	);
	CREATE INDEX stripe_events_refund ON refundkit.stripe_events (refund_id, seq);
	CREATE INDEX stripe_events_payment ON refundkit.stripe_events (payment_id, seq);
	CREATE UNIQUE INDEX stripe_events_seq ON refundkit.stripe_events (seq);`,
	// 9: PayPal's events as webhook --paypal accepted them, as Stripe's
	// (the identity gets a sequence of its own, the indexes their copies).
	`CREATE TABLE refundkit.paypal_events (LIKE refundkit.stripe_events INCLUDING ALL);`,
}

// SchemaVersion is the schema this build writes and reads.
var SchemaVersion = len(migrations)

// schemaVersion is the version of the checkpoint's schema; 0 when the
// database holds none, an error when it is newer than this build's.
func schemaVersion(ctx context.Context, q querier) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('refundkit.schema_migrations') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v int
	if err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM refundkit.schema_migrations`).Scan(&v); err != nil {
		return 0, err
	}
	if v > SchemaVersion {
		return 0, fmt.Errorf("the checkpoint's schema is version %d, newer than this build's %d: use a newer refundkit", v, SchemaVersion)
	}
	return v, nil
}

// migrate brings the schema to SchemaVersion, one transaction per migration,
// under an advisory lock: many workers starting at once migrate it once.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	const lockKey = 0x7266_6b69_7400_0001 // "rfkit", 1: the schema's lock
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(lockKey)); err != nil {
		return err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(lockKey))
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS refundkit;
		CREATE TABLE IF NOT EXISTS refundkit.schema_migrations (
			version    integer PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
		)`); err != nil {
		return err
	}
	have, err := schemaVersion(ctx, conn)
	if err != nil {
		return err
	}
	for v := have + 1; v <= SchemaVersion; v++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO refundkit.schema_migrations (version) VALUES ($1)`, v)
			return err
		})
		if err != nil {
			return fmt.Errorf("schema migration %d: %w", v, err)
		}
	}
	return nil
}
