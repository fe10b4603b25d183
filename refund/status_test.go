package refund_test

// What each refund status a provider documents means for the item, by the
// way it arrives: a create's answer, the look-up, a settle read (README,
// "Pending refunds": the table). A row a test: TestRefundStatusTable.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// statusProvider answers creates with a refund of status create (or the
// error createErr), and settle reads with get (or getErr).
type statusProvider struct {
	*memProvider
	create    string
	createErr error
	get       string
	getErr    error
}

func (p statusProvider) Create(ctx context.Context, it *refund.Item, attempt int) (refund.Answer, error) {
	if p.createErr != nil {
		return refund.Answer{}, p.createErr
	}
	a, err := p.memProvider.Create(ctx, it, attempt)
	a.Status = p.create
	return a, err
}

func (p statusProvider) Get(ctx context.Context, id string) (refund.Refund, error) {
	if p.getErr != nil {
		return refund.Refund{}, p.getErr
	}
	r, err := p.memProvider.Get(ctx, id)
	r.Status = p.get
	return r, err
}

func failure(class refund.Class, status int, code string) error {
	return &refund.Failure{Class: class, Status: status, Code: code, Err: errors.New(code)}
}

func TestRefundStatusTable(t *testing.T) {
	const plan = `{"batch":"B","item":"i1","charge":"ch_1","amount":100}` + "\n"
	type want struct{ status, code string }
	for _, tc := range []struct {
		name string
		// found: the look-up finds the item's own refund in this status
		// (no create); else the create answers create.
		found, create string
		// Then, for an item left pending, a settle read answers get/getErr.
		get    string
		getErr error
		first  want
		settle want // the rerun's result; zero: not asked
		halts  bool // the settle run halts (exit 6)
	}{
		{name: "created succeeded", create: refund.RefundSucceeded, first: want{refund.StatusRefunded, ""}},
		{name: "created pending, settles succeeded", create: refund.RefundPending, get: refund.RefundSucceeded,
			first: want{refund.StatusPending, ""}, settle: want{refund.StatusRefunded, ""}},
		{name: "created requires_action, still so", create: refund.RefundRequiresAction, get: refund.RefundRequiresAction,
			first: want{refund.StatusPending, ""}, settle: want{refund.StatusPending, ""}},
		{name: "created requires_action, canceled", create: refund.RefundRequiresAction, get: refund.RefundCanceled,
			first: want{refund.StatusPending, ""}, settle: want{refund.StatusFailed, "refund_canceled"}},
		{name: "created pending, failed", create: refund.RefundPending, get: refund.RefundFailed,
			first: want{refund.StatusPending, ""}, settle: want{refund.StatusFailed, "refund_failed"}},
		{name: "created failed", create: refund.RefundFailed, first: want{refund.StatusFailed, "refund_failed"}},
		{name: "created canceled", create: refund.RefundCanceled, first: want{refund.StatusFailed, "refund_canceled"}},
		{name: "found succeeded", found: refund.RefundSucceeded, first: want{refund.StatusRefunded, ""}},
		{name: "found pending", found: refund.RefundPending, get: refund.RefundPending,
			first: want{refund.StatusPending, ""}, settle: want{refund.StatusPending, ""}},
		{name: "found requires_action", found: refund.RefundRequiresAction, get: refund.RefundSucceeded,
			first: want{refund.StatusPending, ""}, settle: want{refund.StatusRefunded, ""}},
		{name: "found failed", found: refund.RefundFailed, first: want{refund.StatusFailed, "refund_failed"}},
		{name: "found canceled", found: refund.RefundCanceled, first: want{refund.StatusFailed, "refund_canceled"}},
		// A status not on the allow-list (journal.Statuses) is neither
		// done nor failed: in doubt with its refund kept, nothing sent
		// again, until the provider says a status refundkit knows.
		{name: "created in an unknown status, settles succeeded", create: "weird", get: refund.RefundSucceeded,
			first: want{refund.StatusInDoubt, journal.CodeStatusUnknown}, settle: want{refund.StatusRefunded, ""}},
		{name: "created in an unknown status, still so", create: "SUCCEEDED", get: "SUCCEEDED",
			first: want{refund.StatusInDoubt, journal.CodeStatusUnknown}, settle: want{refund.StatusInDoubt, journal.CodeStatusUnknown}},
		{name: "created with no status, then pending", create: "", get: refund.RefundPending,
			first: want{refund.StatusInDoubt, journal.CodeStatusUnknown}, settle: want{refund.StatusPending, ""}},
		{name: "created in an unknown status, then canceled", create: "weird", get: refund.RefundCanceled,
			first: want{refund.StatusInDoubt, journal.CodeStatusUnknown}, settle: want{refund.StatusFailed, "refund_canceled"}},
		{name: "created pending, then an unknown status", create: refund.RefundPending, get: "refunded",
			first: want{refund.StatusPending, ""}, settle: want{refund.StatusInDoubt, journal.CodeStatusUnknown}},
		{name: "found in an unknown status", found: "completed", get: "completed",
			first: want{refund.StatusInDoubt, journal.CodeStatusUnknown}, settle: want{refund.StatusInDoubt, journal.CodeStatusUnknown}},
		{name: "settle read: 404", create: refund.RefundPending, getErr: failure(refund.ClassFinal, 404, "resource_missing"),
			first: want{refund.StatusPending, ""}, settle: want{refund.StatusInDoubt, "resource_missing"}},
		// No answer (or 429, 503: retried while the provider asks for
		// patience) until the run halts as unable to reach it: still
		// pending, asked again by a later run; the halt is exit 6.
		{name: "settle read: no answer", create: refund.RefundPending, getErr: failure(refund.ClassRetry, 0, "network_error"),
			first: want{refund.StatusPending, ""}, settle: want{refund.StatusPending, "network_error"}, halts: true},
		{name: "settle read: 401", create: refund.RefundPending, getErr: failure(refund.ClassFatal, 401, "api_key_expired"),
			first: want{refund.StatusPending, ""}, settle: want{refund.StatusPending, "api_key_expired"}, halts: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := &memProvider{}
			if tc.found != "" {
				mem.add("ch_1", 100, map[string]string{refund.MetaBatch: "B", refund.MetaItem: "i1", refund.MetaAttempt: "1"})
				mem.refunds[len(mem.refunds)-1].Status = tc.found
			}
			p := statusProvider{memProvider: mem, create: tc.create, get: tc.get}
			path := filepath.Join(t.TempDir(), "j.jsonl")
			got, _ := statusRun(t, p, path, plan)
			if got.Status != tc.first.status || got.Code != tc.first.code {
				t.Fatalf("first run: %s (%s: %s), want %s (%s)", got.Status, got.Code, got.Message, tc.first.status, tc.first.code)
			}
			if tc.settle.status == "" {
				// Settled for good: the rerun asks nothing and says the same.
				again, _ := statusRun(t, statusProvider{memProvider: mem, createErr: errors.New("sent again")}, path, plan)
				if (again.Status == refund.StatusSkipped) != (tc.first.status == refund.StatusRefunded) || again.Code != tc.first.code {
					t.Errorf("rerun: %s (%s), want it settled as before", again.Status, again.Code)
				}
				return
			}
			p.getErr, p.createErr = tc.getErr, errors.New("sent again")
			got, halted := statusRun(t, p, path, plan)
			if got.Status != tc.settle.status || got.Code != tc.settle.code || halted != tc.halts {
				t.Errorf("settle run: %s (%s: %s), halted %v; want %s (%s), halted %v", got.Status, got.Code, got.Message, halted, tc.settle.status, tc.settle.code, tc.halts)
			}
		})
	}
}

// statusRun runs plan's one item and returns its result, and whether the
// run halted (the provider unreachable or refusing the key).
func statusRun(t *testing.T, p refund.Provider, path, plan string) (refund.Result, bool) {
	t.Helper()
	w, state, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var got refund.Result
	_, err = refund.Run(context.Background(), refund.Config{Provider: p, Checkpoint: refund.Journal(w, state), Workers: 1,
		MaxUnanswered: 2, Backoff: refund.Backoff{Base: 1, Max: 1}, OnResult: func(r refund.Result) { got = r }},
		strings.NewReader(plan), "plan.jsonl")
	var h *refund.HaltError
	if err != nil && !errors.As(err, &h) {
		t.Fatalf("run: %v", err)
	}
	if got.Item != "i1" {
		t.Fatalf("no result for i1 (run: %v)", err)
	}
	return got, h != nil
}

// TestStatusTableIsTheAllowList holds docs/records.md's status table to
// journal.Statuses: the Stripe column of each of its first three rows
// names exactly the statuses of one outcome, and every status on the
// list is in the table.
func TestStatusTableIsTheAllowList(t *testing.T) {
	doc, err := os.ReadFile("../docs/records.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]journal.Outcome{"done": journal.OutcomeDone, "accepted, not finished": journal.OutcomeMoving, "ended without moving money": journal.OutcomeDead}
	seen := map[string]bool{}
	code := regexp.MustCompile("`([a-z_]+)`")
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			continue
		}
		head := strings.TrimSpace(cells[1])
		for prefix, outcome := range rows {
			if !strings.HasPrefix(head, prefix) {
				continue
			}
			for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
				if got := journal.OutcomeOf(m[1]); got != outcome {
					t.Errorf("docs/records.md puts %q in the row %q, journal.Statuses says outcome %d", m[1], head, got)
				}
				seen[m[1]] = true
			}
		}
	}
	for status := range journal.Statuses {
		if !seen[status] {
			t.Errorf("status %q of journal.Statuses is not in docs/records.md's table", status)
		}
	}
}
