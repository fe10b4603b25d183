package main

// The requests row (issue 34): what a refund costs in API requests, as the
// simulator counts them by route, for the old core and the new one side by
// side: per new item, per done item on a rerun over the complete journal,
// per item in doubt on the rerun that settles it; and the refunds/s at
// Stripe's test-mode limits, old and new in the same rounds.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
)

// payPalEnv are the fake app credentials of PayPal's side: the simulator
// takes any, PayPal never sees these.
var payPalEnv = []string{"PAYPAL_CLIENT_ID=refundkit-bench-client", "PAYPAL_CLIENT_SECRET=refundkit_bench_secret_not_real"}

// reqProvider is a provider the requests row counts.
type reqProvider struct {
	name string
	// simArgs are the simulator's flags for n payments of the provider.
	simArgs func(b *bench, n int) []string
	// line is the plan item of the k-th generated payment.
	line func(item string, k int) string
	// argv is refund's command line over journal and plan against apiBase.
	argv   func(exe, journal, apiBase, plan string, flags []string) cmdSpec
	create string   // the create's route
	routes []string // the routes shown, in this order; any other seen is added
}

var reqProviders = []reqProvider{
	{
		name:    "Stripe",
		simArgs: func(b *bench, n int) []string { return b.simArgs(n) },
		line: func(item string, k int) string {
			return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":"ch_sim%07d","amount":100,"currency":"usd"}`, batch, item, k)
		},
		argv: func(exe, journal, apiBase, plan string, flags []string) cmdSpec {
			return cmdSpec{argv: append(append([]string{exe, "--journal", journal}, flags...), "--api-base", apiBase, plan)}
		},
		create: "POST /v1/refunds",
		routes: []string{"POST /v1/refunds", "GET /v1/charges/{id}", "GET /v1/refunds", "GET /v1/charges", "GET /v1/refunds/{id}"},
	},
	{
		name: "PayPal",
		simArgs: func(b *bench, n int) []string {
			return []string{"--addr", "127.0.0.1:0", "--addr-file", b.path("sim.url"), "--captures", strconv.Itoa(n)}
		},
		line: func(item string, k int) string {
			return fmt.Sprintf(`{"batch":%q,"item":%q,"capture":"CAPSIM%011d","amount":100,"currency":"usd"}`, batch, item, k)
		},
		argv: func(exe, journal, apiBase, plan string, flags []string) cmdSpec {
			return cmdSpec{argv: append(append([]string{exe, "--provider", "paypal", "--journal", journal}, flags...), plan),
				env: append(slices.Clone(payPalEnv), "PAYPAL_API_BASE="+apiBase)}
		},
		create: "POST /v2/payments/captures/{id}/refund",
		routes: []string{"POST /v2/payments/captures/{id}/refund", "GET /v2/payments/captures/{id}", "GET /v2/checkout/orders/{id}", "GET /v2/payments/refunds/{id}", "POST /v1/oauth2/token"},
	},
}

// writeReqPlan writes the plan items of payments from..to, named
// prefix+k: one refund of 1.00 each, naming its currency.
func writeReqPlan(path string, p reqProvider, prefix string, from, to int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for k := from; k <= to; k++ {
		fmt.Fprintln(w, p.line(prefix+strconv.Itoa(k), k))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// reqCount is what one refund run cost at the simulator.
type reqCount struct {
	sum     summary
	exit    int
	stderr  string
	routes  map[string]int64 // requests by route during the run
	created int64            // refunds the simulator created during the run
}

func (c reqCount) total() int64 {
	var n int64
	for _, v := range c.routes {
		n += v
	}
	return n
}

// countRun runs c against s and counts the requests s served meanwhile.
func (b *bench) countRun(s *sim, c cmdSpec) (reqCount, error) {
	var x reqCount
	before, err := s.stats()
	if err != nil {
		return x, err
	}
	res, err := b.run(c)
	if err != nil {
		return x, err
	}
	after, err := s.stats()
	if err != nil {
		return x, err
	}
	x.exit, x.stderr = res.exit, res.stderr
	if x.exit != 0 && x.exit != 1 && x.exit != 6 { // 6: halted, the provider not answering
		return x, fmt.Errorf("%s: exit status %d%s", b.show(c), x.exit, quoteStderr(x.stderr))
	}
	if x.sum, err = parseSummary(res.stderr); err != nil {
		return x, fmt.Errorf("%s: %v%s", b.show(c), err, quoteStderr(x.stderr))
	}
	x.routes = map[string]int64{}
	for route, n := range after.Requests {
		if d := n - before.Requests[route]; d != 0 {
			x.routes[route] = d
		}
	}
	x.created = after.RefundsCreated - before.RefundsCreated
	return x, nil
}

// setFaults replaces the simulator's fault knobs (POST /_sim/faults).
func setFaults(url, knobs string) error {
	resp, err := http.Post(url+"/_sim/faults", "application/json", strings.NewReader(knobs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /_sim/faults %s: %s: %s", knobs, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// reqCounts are one core's three counted runs of one provider.
type reqCounts struct{ fresh, rerun, doubt reqCount }

// doubtItems are the items put in doubt: as many as refund's -j, so that
// all are in flight at once. With every create answered 500 after its
// commit, refund halts after 8 unanswered calls in a row (PayPal's 500s
// count as unanswered: exit 6); the items in flight by then end in doubt,
// the others would not be tried.
const doubtItems = 16

// countCore runs one core's three counted runs against one simulator of
// n+doubtItems payments: plan (payments 1..n) with a new journal, the same
// plan again over the complete journal, then doubt (the next doubtItems
// payments) once with every create answered 500 after its commit and once
// more without the fault. Each is checked: every item refunded exactly
// once, the rerun sends nothing.
func (b *bench) countCore(p reqProvider, exe string, n int, plan, doubt string) (reqCounts, error) {
	var out reqCounts
	journal := b.path("req-journal.jsonl")
	if err := os.Remove(journal); err != nil && !os.IsNotExist(err) {
		return out, err
	}
	defer os.Remove(journal)
	s, err := b.startSim(p.simArgs(b, n+doubtItems))
	if err != nil {
		return out, err
	}
	defer s.stop()
	flags := []string{"-j", strconv.Itoa(doubtItems), "--rate", "0"}
	cmd := func(plan string) cmdSpec { return p.argv(exe, journal, s.url, plan, flags) }
	want := int64(n)
	fail := func(c cmdSpec, x reqCount, format string, args ...any) error {
		return fmt.Errorf("%s %s: %s%s", p.name, b.show(c), fmt.Sprintf(format, args...), quoteStderr(x.stderr))
	}

	c := cmd(plan)
	if out.fresh, err = b.countRun(s, c); err != nil {
		return out, err
	}
	if x := out.fresh; x.exit != 0 || x.sum.Items != want || x.sum.Refunded != want || x.created != want || x.routes[p.create] != want {
		return out, fail(c, x, "new items: exit %d, %d items, %d refunded; the simulator made %d refunds from %d creates; want %d of each", x.exit, x.sum.Items, x.sum.Refunded, x.created, x.routes[p.create], n)
	}
	if out.rerun, err = b.countRun(s, c); err != nil {
		return out, err
	}
	if x := out.rerun; x.exit != 0 || x.sum.Items != want || x.sum.Skipped != want || x.created != 0 || x.total() != 0 {
		return out, fail(c, x, "rerun over the complete journal: exit %d, %d items, %d skipped, %d refunds made, %d requests %v; want all %d skipped and no request", x.exit, x.sum.Items, x.sum.Skipped, x.created, x.total(), x.routes, n)
	}

	if err := setFaults(s.url, `{"error_after_commit_share":1}`); err != nil {
		return out, err
	}
	c = cmd(doubt)
	faulted, err := b.countRun(s, c)
	if err != nil {
		return out, err
	}
	if x := faulted; x.sum.InDoubt != doubtItems || x.created != doubtItems {
		return out, fail(c, x, "every create answered 500 after its commit: %d in doubt, %d refunds made; want %d of each", x.sum.InDoubt, x.created, doubtItems)
	}
	if err := setFaults(s.url, `{}`); err != nil {
		return out, err
	}
	if out.doubt, err = b.countRun(s, c); err != nil {
		return out, err
	}
	if x := out.doubt; x.exit != 0 || x.sum.Refunded != doubtItems || x.sum.InDoubt != 0 || x.created != 0 {
		return out, fail(c, x, "rerun of the items in doubt: exit %d, %d refunded, %d in doubt, %d refunds made; want all %d refunded (the refunds found), none made", x.exit, x.sum.Refunded, x.sum.InDoubt, x.created, doubtItems)
	}
	st, err := s.stats()
	if err != nil {
		return out, err
	}
	if st.RefundsCreated != want+doubtItems {
		return out, fmt.Errorf("%s: the simulator holds %d refunds after the four runs, want %d (one an item)", p.name, st.RefundsCreated, n+doubtItems)
	}
	return out, nil
}

// requests is issue 34's row: requests per refund, old core and new.
func (b *bench) requests(r *row) error {
	n := max(20, b.sz.PaceItems/2)
	items := min(300, b.sz.PaceItems)
	r.what = fmt.Sprintf("requests per refund, counted by the simulator per route, old core and new: %s items by charge (capture) naming their currency, per new item, per done item on a rerun, per item in doubt; and refunds/s of %s new items at Stripe's test-mode limits (`--rate-limits test`, `--latency 50ms`, `-j 16`)", num(n), num(items))
	r.target = "Stripe: one read and one create per new item, 0 per done item, one read per item in doubt (issue 34)"
	if b.baseBin == "" {
		return fmt.Errorf("the requests row compares the old core with the new: it needs -base-bin (BENCH_BASE)")
	}
	newExe, err := b.tool("refund")
	if err != nil {
		return err
	}
	oldExe, err := b.baseTool("refund")
	if err != nil {
		return err
	}
	oldName := "old " + b.o.BaseRev

	type provCounts struct {
		p        reqProvider
		old, new reqCounts
	}
	var counted []provCounts
	for _, p := range reqProviders {
		plan, doubt := b.path("req-plan-"+strings.ToLower(p.name)+".jsonl"), b.path("req-doubt-"+strings.ToLower(p.name)+".jsonl")
		defer removeAll(plan, doubt)
		if err := writeReqPlan(plan, p, "it", 1, n); err != nil {
			return err
		}
		if err := writeReqPlan(doubt, p, "d", n+1, n+doubtItems); err != nil {
			return err
		}
		shown := p.argv("bin/refund", "$WORK/req-journal.jsonl", "$SIM_URL", b.short(plan), []string{"-j", strconv.Itoa(doubtItems), "--rate", "0"})
		r.commands = append(r.commands,
			fmt.Sprintf("# %s: %s items %s", p.name, num(n), b.short(plan)+": "+p.line("it1", 1)+" ... (and "+b.short(doubt)+": payments "+num(n+1)+".."+num(n+doubtItems)+")"),
			b.short("bin/stripe-sim "+strings.Join(p.simArgs(b, n+doubtItems), " ")+" &   # one simulator per core, for the four runs"),
			strings.Join(append(slices.Clone(shown.env), shown.argv...), " ")+"   # new journal; then again over it; then "+b.short(doubt)+" with POST /_sim/faults {\"error_after_commit_share\":1}, and again with {}",
		)
		b.logf("requests: %s, %d items, old and new core", p.name, n)
		var pc provCounts
		pc.p = p
		if pc.old, err = b.countCore(p, oldExe, n, plan, doubt); err != nil {
			return fmt.Errorf("%s: %w", oldName, err)
		}
		if pc.new, err = b.countCore(p, newExe, n, plan, doubt); err != nil {
			return fmt.Errorf("new: %w", err)
		}
		counted = append(counted, pc)
	}

	// The rate-limited runs: Stripe's new items, old and new in the same
	// rounds.
	ratePlan := b.path("req-rate-plan.jsonl")
	defer removeAll(ratePlan)
	stripe := reqProviders[0]
	if err := writeReqPlan(ratePlan, stripe, "it", 1, items); err != nil {
		return err
	}
	simArgs := b.simArgs(items, "--latency", "50ms", "--rate-limits", "test")
	rateFlags := []string{"-j", "16"}
	r.commands = append(r.commands,
		b.short("bin/stripe-sim "+strings.Join(simArgs, " ")+" &   # a fresh simulator per run"),
		b.short(fmt.Sprintf("{bin,base-bin}/refund --journal %s -j 16 --api-base $SIM_URL %s > /dev/null   # a new journal per run, old and new in the same rounds", b.path("sim-journal.jsonl"), ratePlan)))
	rounds := b.sz.Slow
	b.logf("requests: %d rounds of %d items at --rate-limits test, old and new", rounds, items)
	ns, olds, err := alternate(rounds,
		func() (simRun, error) { return b.refundOnSimWith(newExe, items, ratePlan, simArgs, rateFlags, false) },
		func() (simRun, error) { return b.refundOnSimWith(oldExe, items, ratePlan, simArgs, rateFlags, false) })
	if err != nil {
		return err
	}

	perItem := func(x reqCount, n int) float64 { return float64(x.total()) / float64(n) }
	for _, pc := range counted {
		routes := slices.Clone(pc.p.routes)
		for _, x := range []reqCount{pc.old.fresh, pc.old.rerun, pc.old.doubt, pc.new.fresh, pc.new.rerun, pc.new.doubt} {
			for _, route := range slices.Sorted(maps.Keys(x.routes)) {
				if !slices.Contains(routes, route) {
					routes = append(routes, route)
				}
			}
		}
		r.detailf("**%s**: %s new items, then the same %s done, then %d in doubt; requests per item, as the simulator counted them by route (an item in doubt's are its rerun's, without the fault):", pc.p.name, num(n), num(n), doubtItems)
		r.detailf("")
		head, rule := "| items | core | requests per item |", "| --- | --- | ---: |"
		for _, route := range routes {
			head += " `" + route + "` |"
			rule += " ---: |"
		}
		r.detailf("%s", head+" refund's summary |")
		r.detailf("%s", rule+" --- |")
		for _, ph := range []struct {
			name     string
			items    int
			old, new reqCount
		}{{"new", n, pc.old.fresh, pc.new.fresh}, {"done (rerun)", n, pc.old.rerun, pc.new.rerun}, {"in doubt (rerun)", doubtItems, pc.old.doubt, pc.new.doubt}} {
			for _, side := range []struct {
				name string
				x    reqCount
			}{{oldName, ph.old}, {"new", ph.new}} {
				line := fmt.Sprintf("| %s | %s | %.2f |", ph.name, side.name, perItem(side.x, ph.items))
				for _, route := range routes {
					line += fmt.Sprintf(" %.2f |", float64(side.x.routes[route])/float64(ph.items))
				}
				r.detailf("%s", line+" "+callsOf(side.x.stderr)+" |")
			}
		}
		r.detailf("")
	}

	rate := func(xs []simRun) []float64 { return mapRuns(xs, simRun.itemsPerSec) }
	reqRate := func(x simRun) float64 { return float64(apiRequests(x.stats)) / x.wall.Seconds() }
	perRun := func(x simRun) float64 { return float64(apiRequests(x.stats)) / float64(items) }
	share429 := func(x simRun) float64 {
		return 100 * float64(x.stats.RateLimited) / float64(max(1, apiRequests(x.stats)))
	}
	ratios := pairRatios(rate(ns), rate(olds))
	r.detailf("**Stripe at its test-mode limits** (`--rate-limits test`: 25 requests/s for the account, 25/s per endpoint; `--latency 50ms`, `-j 16`, the default pacing `--share 0.8`), %s new items, %d rounds, old and new in each, the order flipped each round, a fresh simulator and journal per run:", num(items), rounds)
	r.detailf("")
	r.detailf("| core | refunds/s (median) | runs, refunds/s | requests/s over the run (median) | requests per item | 429s, share of requests (median) |")
	r.detailf("| --- | ---: | --- | ---: | ---: | ---: |")
	for _, side := range []struct {
		name string
		runs []simRun
	}{{"new", ns}, {oldName, olds}} {
		r.detailf("| %s | %.1f | %s | %.1f | %.2f | %.1f%% |", side.name, median(rate(side.runs)), joinFloats(rate(side.runs), "%.1f"),
			median(mapRuns(side.runs, reqRate)), median(mapRuns(side.runs, perRun)), median(mapRuns(side.runs, share429)))
	}
	r.detailf("")
	r.detailf("Ratio per round (new / old refunds/s): %s.", joinFloats(ratios, "%.2f"))
	r.detailf("")
	r.detailf("Checked in every run: each of the %s items (and of the %d in doubt) refunded exactly once (refund's summary and the simulator's `refunds_created`, %s after the four runs of a core), the rerun over the complete journal skipping every item with no request at all, the rerun of the items in doubt finding each refund and creating none; in the rate-limited runs every item refunded exactly once. Both cores ran against this tree's `bin/stripe-sim`. The items in doubt: the simulator's `error_after_commit_share: 1` makes every create and answers Stripe's (PayPal's) 500, kept under the idempotency key, so refund leaves the item in doubt (PayPal's side halts, exit 6, after 8 unanswered calls in a row, all %d items in flight by then); the fault is then cleared and only the rerun is counted.", num(n), doubtItems, num(n+doubtItems), doubtItems)

	sf, so := counted[0].new, counted[0].old
	pf, po := counted[1].new, counted[1].old
	r.cand = fmt.Sprintf("Stripe: %.2f requests per new item, %.2f per done item, %.2f per item in doubt; %.1f refunds/s (%.1f requests/s) at test-mode limits. PayPal: %.2f, %.2f, %.2f",
		perItem(sf.fresh, n), perItem(sf.rerun, n), perItem(sf.doubt, doubtItems), median(rate(ns)), median(mapRuns(ns, reqRate)), perItem(pf.fresh, n), perItem(pf.rerun, n), perItem(pf.doubt, doubtItems))
	r.base = fmt.Sprintf("%s: Stripe: %.2f, %.2f, %.2f; %.1f refunds/s (%.1f requests/s). PayPal: %.2f, %.2f, %.2f",
		oldName, perItem(so.fresh, n), perItem(so.rerun, n), perItem(so.doubt, doubtItems), median(rate(olds)), median(mapRuns(olds, reqRate)), perItem(po.fresh, n), perItem(po.rerun, n), perItem(po.doubt, doubtItems))
	r.ratio = fmt.Sprintf("new/old: %.2fx the refunds/s at Stripe's test-mode limits", median(ratios))
	r.judge(perItem(sf.fresh, n) <= 2 && sf.rerun.total() == 0 && perItem(sf.doubt, doubtItems) <= 1)
	return nil
}

// callsOf is refund's count of its calls, as its summary says it.
func callsOf(stderr string) string {
	if m := callsRE.FindString(stderr); m != "" {
		return m
	}
	return oldCallsRE.FindString(stderr)
}
