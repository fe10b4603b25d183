package cli

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// writeAmountPlan writes items of the crash batch, each refunding amount of its
// charge except where amounts says otherwise (by item number), and returns
// its path.
func writeAmountPlan(t *testing.T, dir, name string, items int, amount int64, amounts map[int]int64) string {
	t.Helper()
	var b strings.Builder
	for i := 1; i <= items; i++ {
		a := amount
		if x, ok := amounts[i]; ok {
			a = x
		}
		fmt.Fprintf(&b, `{"batch":%q,"item":"i%d","charge":"ch_sim%07d","amount":%d}`+"\n", crashBatch, i, i, a)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPGPlanThatDiffersIsRefused: a worker fed a plan in which one item's
// amount differs from the plan loaded is refused (exit 2) naming the item,
// its line and the amounts, and sends nothing, while the first worker
// holds claims and after it finished; the same plan again is a no-op.
func TestPGPlanThatDiffersIsRefused(t *testing.T) {
	const items, changed = 8, 5
	r := newPGRig(t, items, stripesim.Faults{})
	plan := writeAmountPlan(t, r.dir, "plan.jsonl", items, 100, nil)
	other := writeAmountPlan(t, r.dir, "other.jsonl", items, 100, map[int]int64{changed: 150})
	for i := range r.want {
		r.want[i].Amount = 100
	}
	hold := crashrig.NewHold(1, 1)
	t.Cleanup(hold.Free)
	r.sim.OnCreate(hold.Park)

	a := r.startPlan(plan, "A", "-j", "1") // one worker: held, it sends nothing more
	go a.Wait()
	select {
	case <-hold.Held():
	case <-a.Exited():
		t.Fatalf("A exited %d before its call was held: %s", a.Code, &a.Stderr)
	}
	refused := func(when string) {
		t.Helper()
		creates, records := r.sim.Creates(), r.records()
		px := newSimProxy(t, r.sim.URL()) // B's requests, all of them
		b := startWorker(t, r.crashRig, r.url, other, "B", []string{"STRIPE_API_BASE=" + px.url}, "-j", "2")
		go b.Wait()
		waitExit(t, b, 30*time.Second)
		if b.Code != ExitUsage {
			t.Fatalf("%s: the other plan exited %d, want %d: %s", when, b.Code, ExitUsage, &b.Stderr)
		}
		msg := b.Stderr.String()
		for _, want := range []string{fmt.Sprintf("<stdin>:%d:", changed), fmt.Sprintf("item %q", fmt.Sprint("i", changed)), "amount 150 here, 100 in the checkpoint"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: the refusal does not say %q: %s", when, want, msg)
			}
		}
		if n := px.requests.Load(); n != 0 {
			t.Errorf("%s: the refused worker sent %d requests to the API", when, n)
		}
		if n := r.sim.Creates(); n != creates {
			t.Errorf("%s: %d refund calls while the other plan was refused", when, n-creates)
		}
		if n := r.records(); n != records {
			t.Errorf("%s: the refused worker wrote %d records", when, n-records)
		}
		var claimedByB int
		if err := r.db.QueryRow(context.Background(), `SELECT count(*) FROM refundkit.items WHERE claimed_by = 'B'`).Scan(&claimedByB); err != nil {
			t.Fatal(err)
		}
		if claimedByB != 0 {
			t.Errorf("%s: the refused worker claimed %d items", when, claimedByB)
		}
	}
	refused("while A works")
	hold.Free()
	waitExit(t, a, 60*time.Second)
	if a.Code != 0 {
		t.Fatalf("A exited %d: %s", a.Code, &a.Stderr)
	}
	refused("after A finished")

	creates, records := r.sim.Creates(), r.records()
	c := r.startPlan(plan, "C", "-j", "2")
	go c.Wait()
	waitExit(t, c, 30*time.Second)
	if c.Code != 0 {
		t.Fatalf("the same plan again exited %d: %s", c.Code, &c.Stderr)
	}
	if n := r.sim.Creates(); n != creates {
		t.Errorf("the same plan again sent %d refund calls", n-creates)
	}
	if n := r.records(); n != records {
		t.Errorf("the same plan again wrote %d records", n-records)
	}
	t.Logf("the same plan again: %s", &c.Stderr)
	r.checkExactlyOnce()
}

// TestPGPasswordNeverPrinted: a run over TCP with a password, and runs
// that fail to connect (wrong host, port, database or password; a URL that
// does not parse; the password in the query or in PGPASSWORD), print the
// password nowhere, and the checkpoint holds it nowhere.
func TestPGPasswordNeverPrinted(t *testing.T) {
	const password = "Pw-9z#q%2F@x:y!SECRET"
	const wrong = "Wr0ng#pw%3A@z:SECRET2"
	srv := pgServer(t)
	ctx := context.Background()
	role := fmt.Sprintf("rk_role_%d", pgDBSeq.Add(1))
	if err := srv.CreateRole(ctx, role, password); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the database (with the role's schema in
	// it) goes before the role.
	t.Cleanup(func() { superExec(t, srv.URL("postgres"), "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()) })
	db, _ := newPGDB(t, srv)
	superExec(t, srv.URL("postgres"), "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" OWNER TO "+pgx.Identifier{role}.Sanitize())

	good := srv.TCPURL(db, role, password)
	r := newPGRigAt(t, good, 6, stripesim.Faults{})
	secrets := []string{password, wrong}
	for _, s := range []string{password, wrong} {
		secrets = append(secrets, url.QueryEscape(s), url.PathEscape(s), strings.TrimPrefix(url.UserPassword("", s).String(), ":"))
	}
	check := func(what string, p *crashrig.Proc) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(p.Stdout.String(), s) || strings.Contains(p.Stderr.String(), s) {
				t.Errorf("%s: the password (as %q) is printed:\nstdout: %s\nstderr: %s", what, s, &p.Stdout, &p.Stderr)
			}
		}
	}

	p := startWorker(t, r.crashRig, good, r.plan, "W", nil, "-v")
	go p.Wait()
	waitExit(t, p, 60*time.Second)
	if p.Code != 0 {
		t.Fatalf("the run over TCP exited %d: %s", p.Code, &p.Stderr)
	}
	check("a run over TCP", p)
	r.checkExactlyOnce()

	port := fmt.Sprint(srv.Port())
	hostPort := "127.0.0.1:" + port
	failing := []struct {
		what, url string
		env       []string
	}{
		{"wrong password", srv.TCPURL(db, role, wrong), nil},
		{"wrong database", srv.TCPURL("no_such_db", role, password), nil},
		{"wrong host", strings.Replace(good, hostPort, "nohost.invalid:"+port, 1), nil},
		{"closed port", strings.Replace(good, hostPort, "127.0.0.1:1", 1), nil},
		{"URL that does not parse", strings.Replace(good, hostPort, "127.0.0.1:notaport", 1), nil},
		{"password in the query", "postgres://" + role + "@" + hostPort + "/no_such_db?sslmode=disable&password=" + url.QueryEscape(password), nil},
		{"password in PGPASSWORD", "postgres://" + role + "@" + hostPort + "/no_such_db?sslmode=disable", []string{"PGPASSWORD=" + password}},
	}
	for _, f := range failing {
		p := startWorker(t, r.crashRig, f.url, r.plan, "F", f.env, "-v")
		go p.Wait()
		waitExit(t, p, 60*time.Second)
		if p.Code == 0 {
			t.Errorf("%s: exit 0: %s", f.what, &p.Stderr)
		}
		if !strings.Contains(p.Stderr.String(), "postgres") {
			t.Errorf("%s: the error does not name the checkpoint: %s", f.what, &p.Stderr)
		}
		check(f.what, p)
		t.Logf("%s: exit %d: %s", f.what, p.Code, lastLines(p.Stderr.String(), 1))
	}

	var dump string
	if err := r.db.QueryRow(ctx, `SELECT concat_ws(E'\n',
		(SELECT string_agg(t::text, E'\n') FROM refundkit.records t),
		(SELECT string_agg(t::text, E'\n') FROM refundkit.items t),
		(SELECT string_agg(t::text, E'\n') FROM refundkit.batches t),
		(SELECT string_agg(t::text, E'\n') FROM refundkit.workers t))`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dump, `"i1"`) {
		t.Fatalf("the dump of the checkpoint holds no record of i1: %s", dump)
	}
	for _, s := range secrets {
		if strings.Contains(dump, s) {
			t.Errorf("the checkpoint holds the password (as %q)", s)
		}
	}
}

// superExec runs sql as the superuser at u.
func superExec(t *testing.T, u, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
