package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"
)

// sizes are the counts of one matrix. Each count's tag holds its quick
// value (CI) and its full one (the report).
type sizes struct {
	Seeds int `size:"1 5"` // runs of each scenario, each with its own seed and simulator

	KillItems          int `size:"200 4000"` // kill -9: batch size
	Kills              int `size:"20 150"`   // kill -9: kills per seed
	TermItems          int `size:"80 1000"`  // SIGTERM: batch size
	Terms              int `size:"3 20"`     // SIGTERM: signals per seed
	StormItems         int `size:"24 200"`   // 429 storm: batch size
	FaultItems         int `size:"80 1500"`  // 500s and drops: batch size
	FaultRounds        int `size:"3 8"`      // runs with faults on, keys forgotten after each
	DiskItems          int `size:"120 2000"` // full disk: batch size
	DiskStartK         int `size:"16 32"`    // first tmpfs size, KiB
	DiskStepK          int `size:"16 64"`    // growth of the tmpfs after each halt, KiB
	TornItems          int `size:"60 800"`   // torn tails: batch size
	TornRounds         int `size:"4 30"`     // killed runs whose journal tail is torn by hand
	Corruptions        int `size:"3 16"`     // mid-file corruptions tried per seed
	LockRounds         int `size:"2 10"`     // second runs started while a first holds the journal
	ShardItems         int `size:"60 2000"`  // two shards together
	HostileCases       int `size:"25 300"`   // random mutations per seed, besides the fixed cases
	LegacyItems        int `size:"40 600"`   // old uncheckpointed run: batch size
	LegacyRefundedEach int `size:"3 3"`      // every n-th item was refunded by the old run

	// Operator rows: batch sizes and kills or rounds per seed.
	NewBatchItems int `size:"40 2000"` // new batch id on refunded charges
	NewBatchKills int `size:"2 20"`
	StaleItems    int `size:"60 2000"` // journal put back stale or deleted
	StaleRounds   int `size:"3 12"`
	ReshardItems  int `size:"60 3000"` // 2 shards, then 3
	GatewayItems  int `size:"60 300"`  // gateway 504s, request going on
	GatewayKills  int `size:"1 6"`
	ClockItems    int `size:"40 800"` // clock jumps with calls in flight
	ClockRounds   int `size:"2 12"`
	MergeItems    int `size:"40 1000"` // merge onto, rename over a live journal
	MergeRounds   int `size:"3 10"`
	EditItems     int `size:"40 1200"` // plan edited after a crash
	EditRounds    int `size:"2 8"`

	// Provider rows: PayPal's kill -9 row takes the Stripe row's sizes;
	// these are their own. PayPal's pending row runs at 150ms a request
	// (tokens must expire mid-run) and exec runs a shell, curl and jq per
	// call: sized to take minutes, not an hour.
	PayPalFaultItems int `size:"24 300"` // PayPal 500s, drops, gateway, kills (FaultRounds kills)
	PayPalStormItems int `size:"8 200"`  // PayPal 429 storm
	PendingItems     int `size:"30 200"` // PayPal PENDING refunds settled by reruns
	PendingKills     int `size:"2 10"`
	KeyAgeItems      int `size:"40 800"` // in doubt past half PayPal's id memory
	KeyAgeRounds     int `size:"2 12"`
	ExecItems        int `size:"30 300"` // exec: kill -9 with commands in flight
	ExecKills        int `size:"4 20"`
	ExecDoubtItems   int `size:"16 96"` // exec: exit 75, exit 1, timeouts
	// Adyen: kill -9 (kills per seed), faults (kills per seed, the
	// receiver killed once), in doubt past half the key window. They wait
	// for every notification before each settling run; the faults row's
	// requests take 100-250ms.
	AdyenKillItems    int `size:"60 4000"`
	AdyenKills        int `size:"4 150"`
	AdyenFaultItems   int `size:"40 600"`
	AdyenFaultRounds  int `size:"3 10"`
	AdyenKeyAgeItems  int `size:"30 800"`
	AdyenKeyAgeRounds int `size:"2 10"`

	// Shared-checkpoint rows (PostgreSQL, NATS): batch sizes, and kills,
	// stops or server restarts per seed (the faults row runs up to
	// FaultRounds rounds). They wait out leases (2-3 s) after every kill,
	// stop and server restart: sized for minutes, not an hour.
	SharedKillItems    int `size:"120 2000"` // 4 workers under kill -9
	SharedKills        int `size:"6 40"`
	SharedStopItems    int `size:"60 600"` // a worker stopped past its lease
	SharedStops        int `size:"1 6"`
	SharedRestartItems int `size:"80 1000"` // the server crashed or shut down
	SharedRestarts     int `size:"2 8"`
	SharedFaultItems   int `size:"80 600"`   // 500s, drops, 504s, 429s, 4 workers
	SharedReshardItems int `size:"100 1500"` // 1 worker, then 4, then 2
	// NATS operator rows besides the file journal's (NewBatch*, Edit*):
	// reruns on a wrong URL or NAME.
	WrongURLItems int `size:"40 1000"`
}

// sizesOf reads every count's quick or full value from its tag.
func sizesOf(quick bool) sizes {
	var sz sizes
	v := reflect.ValueOf(&sz).Elem()
	for i := range v.NumField() {
		var q, f int
		if _, err := fmt.Sscan(v.Type().Field(i).Tag.Get("size"), &q, &f); err != nil {
			panic(fmt.Sprintf("sizes.%s: %v", v.Type().Field(i).Name, err))
		}
		if !quick {
			q = f
		}
		v.Field(i).SetInt(int64(q))
	}
	return sz
}

// scenario is one row of the matrix.
type scenario struct {
	Name  string // for -only
	Title string // in the table
	// What says in a sentence what is injected and what is checked.
	What string
	Run  func(r *rig, sz sizes)
}

var scenarios = []scenario{
	{"kill9", "kill -9 at random moments", whatKill9, runKill9},
	{"sigterm", "SIGTERM mid-batch, restart", whatSigterm, runSigterm},
	{"ratelimit", "429 storm (half the requests)", whatRateLimit, runRateLimit},
	{"errors", "500s, lost answers, network cut, keys expired", whatErrors, runErrors},
	{"diskfull", "journal disk fills up", whatDiskFull, runDiskFull},
	{"torn", "torn tail, mid-file corruption", whatTorn, runTorn},
	{"concurrent", "second run on a journal; two shards", whatConcurrent, runConcurrent},
	{"shard-both-ways", "one payment by two names in three shards, kill -9", whatShardBothWays, needs("journal-merge", runShardBothWays)},
	{"hostile", "hostile plan input", whatHostile, runHostile},
	{"legacy", "old uncheckpointed run, backfilled", whatLegacy, needs("audit", runLegacy)},
	{"newbatch", "operator: new batch id on refunded charges", whatNewBatch, runNewBatch},
	{"stale", "operator: journal restored stale or deleted, keys expired", whatStale, runStale},
	{"reshard", "operator: 2 shards killed, rerun as 3", whatReshard, needs("journal-merge", runReshard)},
	{"gateway", "operator: gateway 504s while the refund goes on", whatGateway, runGateway},
	{"clock", "operator: clock jump with calls in flight", whatClock, runClock},
	{"merge", "operator: merge onto a live journal, rename behind it", whatMerge, needs("journal-merge", runMerge)},
	{"edited", "operator: plan edited after a crash", whatEdited, runEdited},

	{"paypal-kill9", "PayPal: kill -9 at random moments", whatKill9, onPayPal(runKill9)},
	{"paypal-faults", "PayPal: 500s, lost answers, gateway 502/504, kill -9", whatPayPalFaults, onPayPal(runPayPalFaults)},
	{"paypal-ratelimit", "PayPal: 429 storm (a third of the requests)", whatPayPalRateLimit, onPayPal(runRateLimit)},
	{"paypal-pending", "PayPal: PENDING settled by reruns, some FAILED; tokens expire", whatPayPalPending, onPayPal(runPayPalPending)},
	{"paypal-keyage", "PayPal: in doubt past half the request-id memory", whatPayPalKeyAge, onPayPal(runPayPalKeyAge)},
	{"adyen-kill9", "Adyen: kill -9 at random refund calls, settled by notifications", whatAdyenKill9, onAdyen(runAdyenKill9)},
	{"adyen-faults", "Adyen: 429s, 500s, lost answers, gateway 504s, refused and reversed refunds, notifications duplicated, reordered, failed; receiver kill -9", whatAdyenFaults, onAdyen(runAdyenFaults)},
	{"adyen-keyage", "Adyen: in doubt past half the key window, no notification", whatAdyenKeyAge, onAdyen(runAdyenKeyAge)},
	{"exec-kill9", "exec (curl): kill -9 with commands in flight", whatExecKill9, onExec(true, execKillSizes(runKill9))},
	{"exec-kill9-nofind", "exec (curl), no --exec-find: kill -9 with commands in flight", whatExecKill9NoFind, onExec(false, execKillSizes(runKill9))},
	{"exec-doubt", "exec (curl): exit 75, exit 1, timeouts; reconciled", whatExecDoubt, onExec(true, runExecDoubt)},

	{"pg-kill9", "PostgreSQL: 4 workers, kill -9 at random moments", whatPGKill9, onPG(runSharedKill9)},
	{"pg-sigstop", "PostgreSQL: a worker SIGSTOPped past its lease, resumed", whatPGSigstop, onPG(runSharedSigstop)},
	{"pg-dbrestart", "PostgreSQL: the database crashes or restarts mid-batch", whatPGDBRestart, onPG(restartRow(pgDown))},
	{"pg-faults", "PostgreSQL: 4 workers, 500s, lost answers, gateway 504s, 429s", whatPGFaults, onPG(runSharedFaults)},
	{"pg-reshard", "PostgreSQL: workers added and removed mid-batch (1, 4, 2)", whatPGReshard, onPG(runSharedReshard)},

	{"nats-kill9", "NATS: 4 workers, kill -9 at random moments", whatNATSKill9, onNATS(runSharedKill9)},
	{"nats-sigstop", "NATS: a worker SIGSTOPped past its ack-wait, resumed", whatNATSSigstop, onNATS(runSharedSigstop)},
	{"nats-restart", "NATS: the server killed -9 or stopped mid-batch, restarted", whatNATSRestart, onNATS(restartRow(natsDown))},
	{"nats-faults", "NATS: 4 workers, 500s, lost answers, gateway 504s, 429s", whatNATSFaults, onNATS(runSharedFaults)},
	{"nats-reshard", "NATS: workers added and removed mid-batch (1, 4, 2)", whatNATSReshard, onNATS(runSharedReshard)},
	{"nats-newbatch", "NATS: new batch id on refunded charges, same and new NAME", whatNATSNewBatch, onNATS(runNATSNewBatch)},
	{"nats-edited", "NATS: plan edited, a line dropped or added, refused", whatNATSEdited, onNATS(runNATSEdited)},
	{"nats-wrongurl", "NATS: rerun with a wrong URL or NAME", whatNATSWrongURL, onNATS(runNATSWrongURL)},
}

func scenarioByName(name string) *scenario {
	for i := range scenarios {
		if scenarios[i].Name == name {
			return &scenarios[i]
		}
	}
	return nil
}

func scenarioNames() []string {
	var names []string
	for _, s := range scenarios {
		names = append(names, s.Name)
	}
	return names
}

// matrix is what every scenario shares: the binaries and the log.
type matrix struct {
	opts options
	bins map[string]string // name -> path; absent when not built
	work string
	pg   pgCluster // the PostgreSQL server of the pg- rows
}

// binaries the matrix runs; audit, journal-merge and adyen-webhook are
// optional (their checks, and the Adyen rows, are reported as not run
// when they are missing).
var (
	requiredBins = []string{"plan", "refund"}
	optionalBins = []string{"audit", "journal-merge", "adyen-webhook"}
)

func runMatrix(opts options) (*report, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m := &matrix{opts: opts, bins: map[string]string{}}
	for _, name := range append(slices.Clone(requiredBins), optionalBins...) {
		path, err := filepath.Abs(filepath.Join(opts.Bin, name))
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(path); err != nil {
			if slices.Contains(requiredBins, name) {
				return nil, fmt.Errorf("%s: %w (run make build)", path, err)
			}
			continue
		}
		m.bins[name] = path
	}
	work, err := os.MkdirTemp("", "refundkit-chaos-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	m.work = work
	defer m.pg.stop()

	sz := sizesOf(opts.Quick)
	rep := &report{
		Quick:   opts.Quick,
		Command: opts.Command,
		Date:    opts.Now().UTC(),
		CPUs:    runtime.NumCPU(),
		Kernel:  kernelRelease(),
		GoVer:   runtime.Version(),
		Version: binVersion(m.bins["refund"]),
		Missing: m.missingBins(),
	}
	start := time.Now()
	seed := opts.Seed
	for i := range scenarios {
		sc := &scenarios[i]
		if len(opts.Only) > 0 && !slices.Contains(opts.Only, sc.Name) {
			continue
		}
		t := &tally{Name: sc.Name, Title: sc.Title, What: sc.What}
		scStart := time.Now()
		for range sz.Seeds {
			if t.Skipped != "" {
				break
			}
			r, err := m.newRig(t, seed)
			if err != nil {
				return nil, err
			}
			m.logf("%s: seed %d", sc.Name, seed)
			runScenario(sc, r, sz)
			r.close()
			t.Seeds++
			seed++
		}
		t.Elapsed = time.Since(scStart)
		m.logf("%s: %s", sc.Name, t.line())
		rep.Rows = append(rep.Rows, t)
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

func (m *matrix) missingBins() []string {
	var missing []string
	for _, name := range optionalBins {
		if m.bins[name] == "" {
			missing = append(missing, name)
		}
	}
	return missing
}

func (m *matrix) logf(format string, args ...any) {
	fmt.Fprintf(m.opts.Log, "chaos: "+format+"\n", args...)
}

// binVersion is what a binary's --version prints: the commit it was
// built from (with -dirty when the tree had changes).
func binVersion(path string) string {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// kernelRelease is what uname -r prints.
func kernelRelease() string {
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// Exit codes of the refundkit commands (cmd/internal/cli/cli.go, which
// this package may not import), as the binaries' callers see them.
const (
	exitFailed      = 1
	exitUsage       = 2
	exitJournal     = 3
	exitLocked      = 4
	exitCorrupt     = 5
	exitStripe      = 6
	exitInterrupted = 130 // SIGINT
	exitTerminated  = 143 // SIGTERM
)
