package postgres

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint"
)

// Export writes the records of batches (all when none are named) as a file
// journal holds them: in written order, each commit followed by its line.
func (c *Checkpoint) Export(ctx context.Context, w io.Writer, batches []string) (records int, last int64, err error) {
	if c.empty {
		return 0, 0, nil
	}
	rows, err := c.pool.Query(ctx, `SELECT seq, commit_id, rec FROM refundkit.records
		WHERE coalesce(cardinality($1::text[]), 0) = 0 OR batch = ANY($1) ORDER BY seq`, batches)
	if err != nil {
		return 0, 0, c.Wrap("export", err)
	}
	defer rows.Close()
	bw := bufio.NewWriterSize(w, 256<<10)
	var group []byte // the lines of the commit being read
	n, commit := 0, int64(-1)
	flush := func() error {
		if n == 0 {
			return nil
		}
		group = journal.AppendCommit(group, group, n)
		_, err := bw.Write(group)
		group, n = group[:0], 0
		return err
	}
	for rows.Next() {
		var id int64
		var line string
		if err := rows.Scan(&last, &id, &line); err != nil {
			return records, last, c.Wrap("export", err)
		}
		if id != commit {
			if err := flush(); err != nil {
				return records, last, err
			}
			commit = id
		}
		group = append(append(group, line...), '\n')
		n++
		records++
	}
	if err := rows.Err(); err != nil {
		return records, last, c.Wrap("export", err)
	}
	if err := flush(); err != nil {
		return records, last, err
	}
	return records, last, bw.Flush()
}

// ExportPlans writes the stored plans of batches (all when none are named)
// as a plan file, batch by batch in plan order: what audit checks against.
func (c *Checkpoint) ExportPlans(ctx context.Context, w io.Writer, batches []string) (items int, err error) {
	if c.empty {
		return 0, nil
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	var doc string
	err = each(ctx, c.pool, `SELECT plan FROM refundkit.items
		WHERE coalesce(cardinality($1::text[]), 0) = 0 OR batch = ANY($1) ORDER BY batch, line`, []any{batches}, []any{&doc}, func() error {
		bw.WriteString(doc)
		bw.WriteByte('\n')
		items++
		return nil
	})
	if err != nil {
		return items, c.Wrap("export plans", err)
	}
	return items, bw.Flush()
}

// Import replaces the records of every batch that r (a journal, named name in
// errors) holds records of with r's records, in one transaction.
func (c *Checkpoint) Import(ctx context.Context, r io.Reader, name string, last int64) (records int, batches []string, err error) {
	type row struct {
		batch, item, line string
	}
	var rows []row
	seen := map[string]bool{}
	state := journal.NewState()
	var credits []credit
	err = checkpoint.ScanJournal(r, name, func(rec *journal.Record, line string, _ int) {
		if rec.Type == journal.TypeRefunded && rec.Refund != "" {
			credits = append(credits, credit{rec.Refund, key{Batch: rec.Batch, Item: rec.Item}})
		}
		rows = append(rows, row{rec.Batch, rec.Item, line})
		if !seen[rec.Batch] {
			seen[rec.Batch] = true
			batches = append(batches, rec.Batch)
		}
		state.Apply(rec)
	})
	if err != nil {
		return 0, nil, err
	}
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		for _, b := range batches {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "refundkit.batch:"+b); err != nil {
				return err
			}
		}
		// Locking the batches' items keeps claims off them (SKIP LOCKED)
		// and makes appends wait until the import is done.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM refundkit.items WHERE batch = ANY($1) FOR UPDATE`, batches); err != nil {
			return err
		}
		var live int
		var holder *string
		if err := tx.QueryRow(ctx, `SELECT count(*), min(claimed_by) FROM refundkit.items
			WHERE batch = ANY($1) AND claimed_by IS NOT NULL AND lease_until > clock_timestamp()`, batches).Scan(&live, &holder); err != nil {
			return err
		}
		if live > 0 {
			return busy(fmt.Sprintf("%d items of the batches imported are claimed by live workers (%s among them): import once they have stopped", live, *holder))
		}
		var newer int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM refundkit.records WHERE batch = ANY($1)`, batches).Scan(&newer); err != nil {
			return err
		}
		if newer > last {
			return busy("records were written to the batches imported while the merge ran: run the merge again")
		}
		if err := checkPlans(ctx, tx, batches, state, name, nil); err != nil {
			return err
		}
		if err := checkHolders(ctx, tx, batches, credits, name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM refundkit.records WHERE batch = ANY($1)`, batches); err != nil {
			return err
		}
		var commit int64
		if err := tx.QueryRow(ctx, `SELECT nextval('refundkit.commits')`).Scan(&commit); err != nil {
			return err
		}
		worker := "import:" + c.Worker
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"refundkit", "records"}, []string{"commit_id", "batch", "item", "claim_gen", "worker", "rec"},
			pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
				return []any{commit, rows[i].batch, rows[i].item, int64(0), worker, rows[i].line}, nil
			})); err != nil {
			return err
		}
		return restatus(ctx, tx, batches, state)
	})
	if err != nil {
		return 0, nil, c.wrapInput("import", err)
	}
	return len(rows), batches, nil
}

// CheckJournal checks r's records against the stored plans, as Import does,
// and writes nothing: a mismatch is a *refund.InputError at the item's first record.
func (c *Checkpoint) CheckJournal(ctx context.Context, r io.Reader, name string) error {
	sc := journal.NewScanner(r, name)
	state := journal.NewState()
	first := map[key]int{}
	var batches []string
	for sc.Scan() {
		rec := sc.Record()
		k := key{Batch: rec.Batch, Item: rec.Item}
		if _, ok := first[k]; !ok {
			first[k] = sc.Line()
			if !slices.Contains(batches, rec.Batch) {
				batches = append(batches, rec.Batch)
			}
		}
		state.Apply(rec)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if c.empty {
		return nil
	}
	return c.wrapInput("check "+name, checkPlans(ctx, c.pool, batches, state, name, first))
}

// checkHolders refuses records that credit one refund to two items, among
// themselves or against an item of a batch not imported: a refund is one
// item's, ever (refund.Checkpoint.Holder).
func checkHolders(ctx context.Context, tx pgx.Tx, batches []string, credits []credit, name string) error {
	var ids []string
	owner := map[string]key{}
	var shared error
	for _, c := range credits {
		if was, ok := owner[c.id]; ok && was != c.k && shared == nil {
			shared = &refund.InputError{Name: name, Err: fmt.Errorf("refund %s is credited to item %q of batch %q and to item %q of batch %q: a refund is one item's; nothing imported", c.id, was.Item, was.Batch, c.k.Item, c.k.Batch)}
		}
		if _, ok := owner[c.id]; !ok {
			owner[c.id] = c.k
			ids = append(ids, c.id)
		}
	}
	if shared != nil {
		return shared
	}
	if len(ids) == 0 {
		return nil
	}
	var id, batch, item string
	err := tx.QueryRow(ctx, `SELECT rec::jsonb->>'refund', batch, item FROM refundkit.records
		WHERE rec::jsonb->>'type' = 'refunded' AND rec::jsonb->>'refund' = ANY($1) AND NOT batch = ANY($2)
		ORDER BY seq LIMIT 1`, ids, batches).Scan(&id, &batch, &item)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	k := owner[id]
	return &refund.InputError{Name: name, Err: fmt.Errorf("item %q of batch %q is credited with refund %s, which the checkpoint credits to item %q of batch %q: a refund is one item's; nothing imported", k.Item, k.Batch, id, item, batch)}
}

// credit is a refund id a refunded record credits to its item.
type credit struct {
	id string
	k  key
}

// restatus sets the status of every item of batches that state holds
// records of, as they fold.
func restatus(ctx context.Context, tx pgx.Tx, batches []string, state *journal.State) error {
	var bs, items, statuses []string
	var held []bool
	state.Each(func(batch, item string, st journal.ItemState) {
		if !slices.Contains(batches, batch) {
			return
		}
		s, h := statusOf(st)
		bs, items, statuses, held = append(bs, batch), append(items, item), append(statuses, s), append(held, h)
	})
	_, err := tx.Exec(ctx, `UPDATE refundkit.items i SET status = s.status, held = s.held
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bool[]) AS s(batch, item, status, held)
		WHERE i.batch = s.batch AND i.item = s.item`, bs, items, statuses, held)
	return err
}

// WorkerInfo is a worker as the checkpoint knows it.
type WorkerInfo struct {
	Worker    string     `json:"worker"`
	Host      string     `json:"host"`
	PID       int        `json:"pid"`
	Started   time.Time  `json:"started_at"`
	LastSeen  time.Time  `json:"last_seen"`
	Stopped   *time.Time `json:"stopped_at,omitempty"`
	Claims    int        `json:"claims"`      // items it holds claims of
	LiveLease int        `json:"live_leases"` // of which the lease has not run out
}

// ClaimInfo is an item claimed by a worker.
type ClaimInfo struct {
	Batch      string    `json:"batch"`
	Item       string    `json:"item"`
	Worker     string    `json:"claimed_by"`
	Generation int64     `json:"claim_gen"`
	LeaseUntil time.Time `json:"lease_until"`
	Expired    bool      `json:"expired"`
	Status     string    `json:"status"`
}

// BatchInfo is a batch whose plan the checkpoint holds, with its items
// counted by status.
type BatchInfo = refund.BatchInfo

// Holders says who holds what: the batches (all when none are named), the
// items claimed in them, and every worker with its last sign of life.
func (c *Checkpoint) Holders(ctx context.Context, batches []string) ([]BatchInfo, []ClaimInfo, []WorkerInfo, error) {
	if c.empty {
		return nil, nil, nil, nil
	}
	bs, err := c.batchInfo(ctx, batches)
	if err != nil {
		return nil, nil, nil, err
	}
	rows, err := c.pool.Query(ctx, `SELECT batch, item, claimed_by, claim_gen, lease_until, lease_until <= clock_timestamp(), status
		FROM refundkit.items WHERE claimed_by IS NOT NULL AND (coalesce(cardinality($1::text[]), 0) = 0 OR batch = ANY($1))
		ORDER BY batch, line`, batches)
	if err != nil {
		return nil, nil, nil, c.Wrap("holders", err)
	}
	claims, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ClaimInfo])
	if err != nil {
		return nil, nil, nil, c.Wrap("holders", err)
	}
	rows, err = c.pool.Query(ctx, `SELECT w.worker, w.host, w.pid, w.started_at, w.last_seen, w.stopped_at,
			count(i.item), count(i.item) FILTER (WHERE i.lease_until > clock_timestamp())
		FROM refundkit.workers w LEFT JOIN refundkit.items i ON i.claimed_by = w.worker
		GROUP BY w.worker ORDER BY w.started_at, w.worker`)
	if err != nil {
		return nil, nil, nil, c.Wrap("holders", err)
	}
	workers, err := pgx.CollectRows(rows, pgx.RowToStructByPos[WorkerInfo])
	if err != nil {
		return nil, nil, nil, c.Wrap("holders", err)
	}
	return bs, claims, workers, nil
}

// Progress is the batches of the plan this run loaded, their items counted
// by status.
func (c *Checkpoint) Progress(ctx context.Context) ([]BatchInfo, error) {
	c.Mu.Lock()
	batches := c.batches
	c.Mu.Unlock()
	if len(batches) == 0 {
		return nil, nil
	}
	return c.batchInfo(ctx, batches)
}

// batchInfo is batches (all when none), their items counted by status.
func (c *Checkpoint) batchInfo(ctx context.Context, batches []string) ([]BatchInfo, error) {
	var bs []BatchInfo
	var b BatchInfo
	var status *string
	var n int
	err := each(ctx, c.pool, `SELECT b.batch, b.items, b.loaded_at, b.loaded_by, i.status, count(i.item)
		FROM refundkit.batches b LEFT JOIN refundkit.items i USING (batch)
		WHERE coalesce(cardinality($1::text[]), 0) = 0 OR b.batch = ANY($1)
		GROUP BY b.batch, i.status ORDER BY b.batch, i.status`, []any{batches}, []any{&b.Batch, &b.Items, &b.LoadedAt, &b.LoadedBy, &status, &n}, func() error {
		if len(bs) == 0 || bs[len(bs)-1].Batch != b.Batch {
			b.ByStatus = map[string]int{}
			bs = append(bs, b)
		}
		if status != nil {
			bs[len(bs)-1].ByStatus[*status] = n
		}
		return nil
	})
	if err != nil {
		return nil, c.Wrap("holders", err)
	}
	return bs, nil
}
