package cli

// Issue 19, cases 2, 6 and 7, through the real binaries over a PostgreSQL
// checkpoint: records imported with journal-merge -o are checked against
// the plan as a file journal's are, audit audits the plan the checkpoint
// stores, and an import creates the schema as workers do.

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

const bindBatch = "bind"

// bindRig is a simulator with a few charges of 100.00 USD, a fresh
// database and a directory for plans and journals.
type bindRig struct {
	t   *testing.T
	sim *crashrig.Sim
	// twin has the same charges: journals made there are another
	// account's history, whose keys the rig's simulator has not seen.
	twin *crashrig.Sim
	dir  string
	url  string
	db   *pgxpool.Pool
}

func newBindRig(t *testing.T, migrate bool) *bindRig {
	t.Helper()
	var charges []stripesim.Charge
	for _, c := range []string{"x", "y", "z", "w", "v"} {
		charges = append(charges, stripesim.Charge{ID: "ch_b" + c, PaymentIntent: "pi_b" + c, Currency: "usd", Amount: 10000})
	}
	sim, err := crashrig.StartSim(stripesim.Config{Charges: charges, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	twin, err := crashrig.StartSim(stripesim.Config{Charges: charges, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(twin.Close)
	_, dbURL := newPGDB(t, pgServer(t))
	if migrate {
		if err := postgres.Migrate(context.Background(), dbURL); err != nil {
			t.Fatal(err)
		}
	}
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return &bindRig{t: t, sim: sim, twin: twin, dir: t.TempDir(), url: dbURL, db: db}
}

// item is a plan line of the rig's batch.
func bindItem(item, charge string, amount int64) string {
	return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"amount":%d}`, bindBatch, item, charge, amount)
}

// write writes lines to a file of the rig's directory and returns its path.
func (r *bindRig) write(name string, lines ...string) string {
	r.t.Helper()
	path := filepath.Join(r.dir, name)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		r.t.Fatal(err)
	}
	return path
}

// run runs bin (one of the package's commands, on PATH) to its end, with
// stdin from the file named (none when ""), and the simulator's API base
// and key; more adds to the environment (a later KEY=VALUE wins).
func (r *bindRig) run(bin, stdin string, more []string, args ...string) *crashrig.Proc {
	r.t.Helper()
	path, err := exec.LookPath(bin)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := crashrig.Cmd{Bin: path, Args: args, Env: append(crashrig.Env(scriptKey, r.sim.URL()), more...)}
	if stdin != "" {
		f, err := os.Open(stdin)
		if err != nil {
			r.t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdin = f
	}
	p, err := crashrig.Start(cmd)
	if err != nil {
		r.t.Fatal(err)
	}
	go p.Wait()
	waitExit(r.t, p, 60*time.Second)
	return p
}

// want fails the test unless p exited with code.
func (r *bindRig) want(p *crashrig.Proc, code int, what string) {
	r.t.Helper()
	if p.Code != code {
		r.t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, p.Code, code, &p.Stdout, &p.Stderr)
	}
}

// onTwin is the environment of a run against the twin simulator.
func (r *bindRig) onTwin() []string { return []string{"STRIPE_API_BASE=" + r.twin.URL()} }

// worker runs refund over the checkpoint with the plan on stdin.
func (r *bindRig) worker(plan, name string, more []string, args ...string) *crashrig.Proc {
	r.t.Helper()
	return r.run("refund", plan, more, append([]string{"--journal", r.url, "--lease", pgLease.String(), "--worker", name, "--rate", "0"}, args...)...)
}

// refundsOn are the refunds at the simulator of charge.
func (r *bindRig) refundsOn(charge string) []crashrig.Refund {
	var out []crashrig.Refund
	for _, rf := range r.sim.AllRefunds() {
		if rf.Payment == charge {
			out = append(out, rf)
		}
	}
	return out
}

// records is every record line of the checkpoint, in order.
func (r *bindRig) records() string {
	r.t.Helper()
	var s *string
	if err := r.db.QueryRow(context.Background(), `SELECT string_agg(rec, E'\n' ORDER BY seq) FROM refundkit.records`).Scan(&s); err != nil {
		r.t.Fatal(err)
	}
	if s == nil {
		return ""
	}
	return *s
}

// storedPlans counts the batches whose plan the checkpoint stores.
func (r *bindRig) storedPlans() int {
	r.t.Helper()
	var n int
	if err := r.db.QueryRow(context.Background(), `SELECT count(*) FROM refundkit.batches`).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// recordLines are the record lines of item in the journal at path.
func recordLines(t *testing.T, path, item string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := journal.NewScanner(f, path)
	for sc.Scan() {
		if sc.Record().Item != item {
			continue
		}
		b, err := journal.MarshalLine(nil, sc.Record())
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.TrimSuffix(string(b), "\n"))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

func wantIn(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not say %q: %s", what, w, text)
		}
	}
}

// TestPGImportCreatesTheSchema (issue 19, case 7): journal-merge -o
// postgres://... into a database without the schema creates it and
// imports, as a worker would; the export, a reader, still writes nothing.
func TestPGImportCreatesTheSchema(t *testing.T) {
	r := newBindRig(t, false)
	plan := r.write("plan.jsonl", bindItem("i1", "ch_bx", 500), bindItem("i2", "ch_bz", 500))
	j := filepath.Join(r.dir, "j.jsonl")
	r.want(r.run("refund", plan, nil, "--journal", j, "--rate", "0"), ExitOK, "the plan on a file journal")

	p := r.run("journal-merge", "", nil, r.url)
	r.want(p, ExitOK, "the export of a database without the schema")
	var tables int
	if err := r.db.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'refundkit'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("the export, a reader, created %d refundkit tables", tables)
	}

	p = r.run("journal-merge", "", nil, "-o", r.url, j)
	r.want(p, ExitOK, "the import into a database without the schema")
	wantIn(t, "the import", p.Stderr.String(), "imported 4 records")
	creates := r.sim.Creates()
	p = r.worker(plan, "W", nil)
	r.want(p, ExitOK, "the plan on the imported checkpoint")
	if n := r.sim.Creates(); n != creates {
		t.Errorf("%d refund calls after the import", n-creates)
	}
	r.want(r.run("audit", "", nil, r.url), ExitOK, "audit of the imported checkpoint")
}

// TestPGImportNeverPrintsThePassword: the import, which now migrates
// first, prints no password when the connection is refused, and imports
// over TCP with it into a database without the schema.
func TestPGImportNeverPrintsThePassword(t *testing.T) {
	const password = "Imp-7q#x%2F@y:z!SECRET"
	const wrong = "Wr0ng-imp#%3A@SECRET2"
	r := newBindRig(t, false)
	srv := pgServer(t)
	ctx := context.Background()
	role := fmt.Sprintf("rk_import_%d", pgDBSeq.Add(1))
	if err := srv.CreateRole(ctx, role, password); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { superExec(t, srv.URL("postgres"), "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()) })
	db, _ := newPGDB(t, srv) // dropped before the role
	superExec(t, srv.URL("postgres"), "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" OWNER TO "+pgx.Identifier{role}.Sanitize())

	plan := r.write("plan.jsonl", bindItem("i1", "ch_bx", 500))
	j := filepath.Join(r.dir, "j.jsonl")
	r.want(r.run("refund", plan, nil, "--journal", j, "--rate", "0"), ExitOK, "the plan on a file journal")
	for _, c := range []struct {
		pw   string
		code int
	}{{wrong, ExitJournal}, {password, ExitOK}} {
		p := r.run("journal-merge", "", nil, "-o", srv.TCPURL(db, role, c.pw), j)
		r.want(p, c.code, "the import with the password "+c.pw)
		for _, s := range []string{password, wrong, url.QueryEscape(password), url.QueryEscape(wrong), url.PathEscape(password), url.PathEscape(wrong)} {
			if strings.Contains(p.Stderr.String(), s) || strings.Contains(p.Stdout.String(), s) {
				t.Errorf("the import prints the password (as %q): %s", s, &p.Stderr)
			}
		}
	}
}
