package main

// The Adyen rows: `refund --provider adyen` against the simulator with the
// notification receiver (adyen-webhook) keeping the notifications the
// simulator posts meanwhile, beside Stripe's refund of the same shape; the
// settling rerun, which settles every pending item from the notifications
// file with no API call, beside Stripe's rerun of a complete journal; and
// the receiver's own rate and fsyncs, beside BenchmarkFileAdd.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/refundkit/refundkit/refund/provider/adyen/webhook"
	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// adyenEnv are the fake credentials of every Adyen command: the simulator
// takes this API key for its merchant account and signs its notifications
// with this HMAC key; real Adyen never sees them.
var adyenEnv = []string{
	"ADYEN_API_KEY=refundkit_bench_adyen_key_not_real",
	"ADYEN_MERCHANT_ACCOUNT=RefundkitSim",
	"ADYEN_HMAC_KEY=6F1D2C3B4A5968778695A4B3C2D1E0F00F1E2D3C4B5A69788796A5B4C3D2E1F0",
}

// adyenEnvShown is how the report names them.
const adyenEnvShown = "ADYEN_API_KEY=... ADYEN_MERCHANT_ACCOUNT=RefundkitSim ADYEN_HMAC_KEY=...   # fake, set by scripts/bench"

// adyenRefundRoute is the simulator's name of Adyen's refund route.
const adyenRefundRoute = "POST /v71/payments/{paymentPspReference}/refunds"

// adyenFlags are refund's flags in the Adyen rows and their Stripe
// counterparts: zero latency, no rate limit, -j 64.
var adyenFlags = []string{"-j", "64", "--rate", "0"}

// writeAdyenPlan writes n plan items of Adyen's shape: one refund of 1.00
// EUR of each payment SIMPAY0000000001... that `stripe-sim --adyen-payments
// N` generates (every generated payment is at least 1.00 EUR).
func writeAdyenPlan(path string, n int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(w, `{"batch":%q,"item":"it%d","psp_reference":"SIMPAY%010d","amount":100,"currency":"eur"}`+"\n", batch, i, i)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// adyenPlanShown is the shell equivalent of writeAdyenPlan, for the report.
func (b *bench) adyenPlanShown(path string, n int) string {
	return b.short(fmt.Sprintf(`seq %d | awk '{printf "{\"batch\":\"%s\",\"item\":\"it%%d\",\"psp_reference\":\"SIMPAY%%010d\",\"amount\":100,\"currency\":\"eur\"}\n", $1, $1}' > %s`, n, batch, path))
}

// adyenRun is one run of the whole loop: receiver, simulator, refund, then
// the simulator's flush.
type adyenRun struct {
	result         // refund's
	sum    summary // refund's summary
	// pending is refund's count of items left pending.
	pending int64
	stats   stripesim.Stats // the simulator's, after the flush
	// untilFlushed is from refund's start to the flush's answer: every
	// notification delivered and kept by then.
	untilFlushed time.Duration
	recv         webhook.Stats
	fsyncs       int64 // the receiver's fsyncs (perf stat); -1 when not counted
	notes        int   // lines of the notifications file
}

func (r adyenRun) itemsPerSec() float64 { return float64(r.sum.Items) / r.wall.Seconds() }

// notesPerSec is notifications kept over refund's start to the flush.
func (r adyenRun) notesPerSec() float64 { return float64(r.recv.Added) / r.untilFlushed.Seconds() }

// lag is how long after refund's end the last notification was kept.
func (r adyenRun) lag() time.Duration { return r.untilFlushed - r.wall }

var pendingRE = regexp.MustCompile(`in_doubt, (\d+) pending`)

// parsePending reads refund's count of pending items (absent: none).
func parsePending(stderr string) int64 {
	m := pendingRE.FindStringSubmatch(stderr)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// adyenPaths are the files of one loop.
func (b *bench) adyenPaths() (journal, notes string) {
	return b.path("adyen-journal.jsonl"), b.path("adyen-notes.jsonl")
}

// adyenLoop starts the receiver (under perf stat when it can count
// fsyncs) and a simulator posting its notifications to it, refunds the
// plan's items with a new journal and notifications file, waits for the
// simulator's flush, stops both and checks every count: every item
// received (pending) with one create, every notification delivered once
// and kept once, nothing refused.
func (b *bench) adyenLoop(items int, plan string) (adyenRun, error) {
	run := adyenRun{fsyncs: -1}
	refundExe, err := b.tool("refund")
	if err != nil {
		return run, err
	}
	whExe, err := b.tool("adyen-webhook")
	if err != nil {
		return run, err
	}
	simExe, err := b.tool("stripe-sim")
	if err != nil {
		return run, err
	}
	journal, notes := b.adyenPaths()
	others := strings.TrimSuffix(notes, ".jsonl") + ".others.jsonl"
	removeAll(journal, notes, others)
	defer removeAll(others)

	argv := []string{whExe, "--listen", "127.0.0.1:0", "--out", notes, "--addr-file", b.path("wh.url")}
	perfOut := b.path("wh-perf.out")
	os.Remove(perfOut)
	perf, _ := b.perfPath()
	if perf != "" {
		argv = append([]string{perf, "stat", "-x,", "-o", perfOut, "-e", fsyncEvents, "--"}, argv...)
	}
	wh, err := b.startProc(argv, adyenEnv, b.path("wh.url"))
	if err != nil {
		return run, err
	}
	if perf != "" {
		wh.perfOut = perfOut
	}
	whStopped := false
	defer func() {
		if !whStopped {
			wh.stop()
		}
	}()
	s, err := b.startProc(append([]string{simExe}, b.adyenSimArgs(items, wh.url)...), adyenEnv, b.path("sim.url"))
	if err != nil {
		return run, err
	}
	simStopped := false
	defer func() {
		if !simStopped {
			s.stop()
		}
	}()

	c := cmdSpec{argv: append(append([]string{refundExe, "--provider", "adyen", "--journal", journal, "--notifications", notes}, adyenFlags...), plan),
		env: append(slices.Clone(adyenEnv), "ADYEN_API_BASE="+s.url)}
	start := time.Now()
	run.result, err = b.run(c)
	if err != nil {
		return run, err
	}
	if run.exit != 0 {
		return run, fmt.Errorf("refund --provider adyen: exit status %d%s", run.exit, quoteStderr(run.stderr))
	}
	flushed, err := b.adyenFlush(s.url)
	if err != nil {
		return run, err
	}
	run.untilFlushed = time.Since(start)
	if run.stats, err = simStats(s.url); err != nil {
		return run, err
	}
	s.stop()
	simStopped = true
	wh.stop()
	whStopped = true

	if run.sum, err = parseSummary(run.stderr); err != nil {
		return run, err
	}
	run.pending = parsePending(run.stderr)
	if err := json.Unmarshal(bytes.TrimSpace(wh.stdout.Bytes()), &run.recv); err != nil {
		return run, fmt.Errorf("adyen-webhook's counters %q: %v%s", wh.stdout.String(), err, quoteStderr(wh.stderr.String()))
	}
	if perf != "" {
		if run.fsyncs, err = perfFsyncs(readFile(perfOut)); err != nil {
			return run, err
		}
	}
	if run.notes, _, err = countLines(notes, ""); err != nil {
		return run, err
	}
	n := int64(items)
	ad := run.stats.Adyen
	var refused int64
	for _, k := range run.recv.Rejected {
		refused += k
	}
	switch {
	case run.sum.Items != n || run.pending+run.sum.Refunded != n || run.sum.Failed != 0 || run.sum.InDoubt != 0:
		return run, fmt.Errorf("refund --provider adyen: %d items, %d pending, %d refunded, %d failed, %d in doubt; want all %d pending or refunded", run.sum.Items, run.pending, run.sum.Refunded, run.sum.Failed, run.sum.InDoubt, n)
	case run.sum.Creates != n || run.stats.Requests[adyenRefundRoute] != n || ad.RefundsCreated != n || ad.Refunds["refunded"] != n:
		return run, fmt.Errorf("refund made %d create calls; the simulator got %d refund requests, received %d refunds, %d refunded; want %d of each", run.sum.Creates, run.stats.Requests[adyenRefundRoute], ad.RefundsCreated, ad.Refunds["refunded"], n)
	case flushed.Pending != 0 || flushed.Delivered != n || flushed.Queued != n:
		return run, fmt.Errorf("the flush answered %+v: want %d notifications queued and delivered, none pending", flushed, n)
	case run.recv.Added != n || run.recv.Duplicates != 0 || refused != 0 || run.recv.StoreErrors != 0 || run.notes != items:
		return run, fmt.Errorf("adyen-webhook kept %d notifications (%d duplicates, %d requests refused, %d store errors), its file has %d lines; want %d kept once, nothing refused", run.recv.Added, run.recv.Duplicates, refused, run.recv.StoreErrors, run.notes, n)
	}
	return run, nil
}

// adyenSimArgs are the simulator's flags for a run over n Adyen payments,
// its notifications posted to the receiver at whURL.
func (b *bench) adyenSimArgs(n int, whURL string) []string {
	return []string{"--addr", "127.0.0.1:0", "--addr-file", b.path("sim.url"), "--adyen-payments", strconv.Itoa(n), "--adyen-notify-url", whURL + webhook.DefaultPath}
}

// adyenFlush waits (POST /_sim/adyen/flush) until the simulator has
// delivered every notification queued so far, and returns its counts.
func (b *bench) adyenFlush(url string) (adyensim.NotifyStats, error) {
	return simFlush[adyensim.NotifyStats](b.ctx, url, "/_sim/adyen/flush")
}

// simFlush posts to one of the simulator's flush routes, which answers
// once everything it queued is delivered, and decodes the counts it sends.
func simFlush[T any](ctx context.Context, url, route string) (T, error) {
	var counts T
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+route, nil)
	if err != nil {
		return counts, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return counts, fmt.Errorf("POST %s: %v", route, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return counts, fmt.Errorf("POST %s: %s: %s", route, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, &counts); err != nil {
		return counts, fmt.Errorf("POST %s: %q: %v", route, body, err)
	}
	return counts, nil
}

// simStats reads the simulator's counters.
func simStats(url string) (stripesim.Stats, error) {
	return (&sim{url: url}).stats()
}

// adyenLoopCommands are the loop's commands, as the report shows them.
func (b *bench) adyenLoopCommands(items int, plan string) []string {
	journal, notes := b.adyenPaths()
	return []string{
		adyenEnvShown,
		b.short(b.adyenPlanShown(plan, items)),
		b.short(fmt.Sprintf("bin/adyen-webhook --listen 127.0.0.1:0 --out %s --addr-file %s &   # a fresh receiver and file per run; counted by perf stat -x, -e %s when perf can", notes, b.path("wh.url"), fsyncEvents)),
		b.short("bin/stripe-sim " + strings.Join(b.adyenSimArgs(items, "$WH_URL"), " ") + " &   # a fresh simulator per run"),
		b.short(fmt.Sprintf("ADYEN_API_BASE=$SIM_URL bin/refund --provider adyen --journal %s --notifications %s %s %s > /dev/null   # a new journal per run", journal, notes, strings.Join(adyenFlags, " "), plan)),
		"curl -X POST $SIM_URL/_sim/adyen/flush   # returns once every notification is delivered and kept",
	}
}

// adyenRefund refunds N items with --provider adyen against the
// simulator, the receiver keeping its notifications meanwhile, beside
// Stripe's refund of the same items in the same rounds.
func (b *bench) adyenRefund(r *row) error {
	items := b.sz.SimItems
	r.what = fmt.Sprintf("`refund --provider adyen` of %s items against the simulator: zero latency, `--rate 0 -j 64`, real fsync, `adyen-webhook` keeping the notifications meanwhile", num(items))
	r.target = "beside Stripe's row of the same shape; no target"
	plan, stripePlan := b.path("adyen-plan.jsonl"), b.path("sim-plan.jsonl")
	journal, notes := b.adyenPaths()
	defer removeAll(plan, stripePlan, journal, notes, b.path("sim-journal.jsonl"))
	if err := writeAdyenPlan(plan, items); err != nil {
		return err
	}
	r.commands = append(r.commands, b.adyenLoopCommands(items, plan)...)
	if err := b.gen2(r, stripePlan, "plan", items, batch); err != nil {
		return err
	}
	r.commands = append(r.commands,
		b.short("bin/stripe-sim "+strings.Join(b.simArgs(items), " ")+" &   # Stripe's side: a fresh simulator per run"),
		b.short(fmt.Sprintf("bin/refund --journal %s %s --api-base $SIM_URL %s > /dev/null", b.path("sim-journal.jsonl"), strings.Join(adyenFlags, " "), stripePlan)))
	b.logf("adyen: %d rounds of Adyen's loop and Stripe's refund, %d items", b.sz.Fast, items)
	// One type for both sides, as alternate wants.
	type either struct {
		ad adyenRun
		st simRun
	}
	ae, se, err := alternate(b.sz.Fast,
		func() (either, error) { x, err := b.adyenLoop(items, plan); return either{ad: x}, err },
		func() (either, error) {
			x, err := b.refundOnSim(items, stripePlan, b.simArgs(items), adyenFlags, false)
			return either{st: x}, err
		})
	if err != nil {
		return err
	}
	var as []adyenRun
	var ss []simRun
	for i := range ae {
		as = append(as, ae[i].ad)
	}
	for i := range se {
		ss = append(ss, se[i].st)
	}
	aRate, sRate := mapRuns(as, adyenRun.itemsPerSec), mapRuns(ss, simRun.itemsPerSec)
	ratio := median(pairRatios(aRate, sRate))
	amid := as[medianIndex(aRate)]
	r.cand = fmt.Sprintf("%.0f items/s, every item received (pending); %.1f journal records per fsync; %.0f MB", median(aRate),
		median(mapRuns(as, func(x adyenRun) float64 { return float64(x.sum.Records) / float64(max(1, x.sum.Fsyncs)) })), slices.Max(mapRuns(as, func(x adyenRun) float64 { return float64(x.rss) / 1e6 })))
	r.base = fmt.Sprintf("Stripe, same shape: %.0f items/s; %.1f records per fsync; %.0f MB", median(sRate), median(mapRuns(ss, recordsPerFsync)), slices.Max(mapRuns(ss, rssOf)))
	r.ratio = fmt.Sprintf("%.2fx Stripe's items/s", ratio)
	r.detailf("%d rounds, Adyen's and Stripe's runs alternated, the order flipped each round; a fresh simulator, receiver and journal per run:", b.sz.Fast)
	r.detailf("")
	r.detailf("| side | items/s (median) | runs, items/s | wall (median) | API requests per item | journal records / fsyncs (median run) | peak RSS (max) |")
	r.detailf("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
	r.detailf("| Adyen, `--provider adyen` | %.0f | %s | %.2f s | %.2f | %s / %s | %.0f MB |", median(aRate), joinFloats(aRate, "%.0f"),
		median(mapRuns(as, func(x adyenRun) float64 { return x.wall.Seconds() })),
		median(mapRuns(as, func(x adyenRun) float64 { return float64(apiRequests(x.stats)) / float64(items) })),
		num(int(amid.sum.Records)), num(int(amid.sum.Fsyncs)), slices.Max(mapRuns(as, func(x adyenRun) float64 { return float64(x.rss) / 1e6 })))
	smid := ss[medianIndex(sRate)]
	r.detailf("| Stripe | %.0f | %s | %.2f s | %.2f | %s / %s | %.0f MB |", median(sRate), joinFloats(sRate, "%.0f"), median(mapRuns(ss, wallSeconds)),
		median(mapRuns(ss, func(x simRun) float64 { return float64(apiRequests(x.stats)) / float64(items) })),
		num(int(smid.sum.Records)), num(int(smid.sum.Fsyncs)), slices.Max(mapRuns(ss, rssOf)))
	r.detailf("")
	r.detailf("Ratio per round (Adyen / Stripe items/s): %s.", joinFloats(pairRatios(aRate, sRate), "%.2f"))
	r.detailf("")
	r.detailf("items/s is the items over refund's wall time, start-up and plan load included. Adyen answers each refund only \"received\": every item is journaled pending (its intent, then its pending outcome), with one `POST /v71/payments/{paymentPspReference}/refunds` an item and, before it, a look-up in the notifications file (refund's summary counts them as notification look-ups: %s), not at Adyen; Stripe's side looks each item up at the simulator (`GET /v1/refunds?charge=`) before its `POST /v1/refunds`. Meanwhile the simulator posted each refund's REFUND notification to `adyen-webhook`, which verified and fsynced it (the receiver, the simulator and refund share the 2 cores). Checked in every Adyen run: all %s items pending, %s create calls and as many refunds at the simulator, every notification delivered once and kept once in the file (the flush's and the receiver's counters), nothing refused; in every Stripe run every item refunded exactly once.",
		num(int(amid.sum.Lists)), num(items), num(items))
	return nil
}

// adyenSettle times the rerun that settles every pending item from the
// notifications file, with no API call, beside Stripe's rerun over a
// complete journal (every item skipped).
func (b *bench) adyenSettle(r *row) error {
	items := b.sz.SimItems
	r.what = fmt.Sprintf("settling rerun: `refund --provider adyen --notifications` over %s pending items and a %s-notification file, zero API calls", num(items), num(items))
	r.target = "beside Stripe's rerun of a complete journal; no target"
	exe, err := b.tool("refund")
	if err != nil {
		return err
	}
	plan, stripePlan := b.path("adyen-plan.jsonl"), b.path("sim-plan.jsonl")
	journal, notes := b.adyenPaths()
	pending0, notes0, stripe0 := b.path("adyen-pending0.jsonl"), b.path("adyen-notes0.jsonl"), b.path("stripe-complete0.jsonl")
	settleJ, stripeJ := b.path("adyen-settle.jsonl"), b.path("stripe-rerun.jsonl")
	defer removeAll(plan, stripePlan, journal, notes, pending0, notes0, stripe0, settleJ, stripeJ, b.path("sim-journal.jsonl"))
	if err := writeAdyenPlan(plan, items); err != nil {
		return err
	}
	r.commands = append(r.commands, "# once: Adyen's loop of the adyen row (receiver, simulator, refund, flush), its journal and notifications file kept")
	r.commands = append(r.commands, b.adyenLoopCommands(items, plan)...)
	b.logf("adyen-settle: the pending journal and the notifications of %d items", items)
	if _, err := b.adyenLoop(items, plan); err != nil {
		return err
	}
	if err := os.Rename(journal, pending0); err != nil {
		return err
	}
	if err := os.Rename(notes, notes0); err != nil {
		return err
	}
	r.commands = append(r.commands, "# once: Stripe's refund of the adyen row's Stripe side, its complete journal kept")
	if err := b.gen2(r, stripePlan, "plan", items, batch); err != nil {
		return err
	}
	b.logf("adyen-settle: Stripe's complete journal of %d items", items)
	if _, err := b.refundOnSim(items, stripePlan, b.simArgs(items), adyenFlags, false); err != nil {
		return err
	}
	if err := os.Rename(b.path("sim-journal.jsonl"), stripe0); err != nil {
		return err
	}
	dead, err := deadAPI()
	if err != nil {
		return err
	}
	n := int64(items)
	settle := cmdSpec{argv: append(append([]string{exe, "--provider", "adyen", "--journal", settleJ, "--notifications", notes0}, adyenFlags...), plan),
		env: append(slices.Clone(adyenEnv), "ADYEN_API_BASE="+dead)}
	rerun := cmdSpec{argv: append(append([]string{exe, "--journal", stripeJ}, adyenFlags...), "--api-base", dead, stripePlan)}
	// As the report shows them: the fake keys named, the dead port as $DEAD_URL.
	settleShown := settle
	settleShown.env = []string{"ADYEN_API_BASE=$DEAD_URL"}
	r.commands = append(r.commands,
		"DEAD_URL=http://127.0.0.1:PORT   # a loopback port where nothing listens",
		b.show(settleShown)+"   # over a fresh copy of the pending journal each run",
		strings.ReplaceAll(b.show(rerun), dead, "$DEAD_URL")+"   # over a fresh copy of Stripe's complete journal each run")
	type rerunRun struct {
		result
		sum summary
	}
	side := func(c cmdSpec, from, to string, check func(rerunRun) error) func() (rerunRun, error) {
		return func() (rerunRun, error) {
			var x rerunRun
			if err := copyFile(from, to); err != nil {
				return x, err
			}
			var err error
			if x.result, err = b.run(c); err != nil {
				return x, err
			}
			if x.exit != 0 {
				return x, fmt.Errorf("%s: exit status %d%s", b.show(c), x.exit, quoteStderr(x.stderr))
			}
			if x.sum, err = parseSummary(x.stderr); err != nil {
				return x, err
			}
			if err := check(x); err != nil {
				return x, fmt.Errorf("%s: %v%s", b.show(c), err, quoteStderr(x.stderr))
			}
			return x, nil
		}
	}
	settled := func(x rerunRun) error {
		if x.sum.Items != n || x.sum.Refunded != n || parsePending(x.stderr) != 0 || x.sum.Creates != 0 || x.sum.Lists != 0 {
			return fmt.Errorf("%d items: %d refunded, %d pending, %d creates and %d reads; want all %d refunded, zero calls", x.sum.Items, x.sum.Refunded, parsePending(x.stderr), x.sum.Creates, x.sum.Lists, n)
		}
		_, fromNotes, err := countLines(settleJ, `"source":"settled"`)
		if err != nil {
			return err
		}
		_, succeeded, err := countLines(settleJ, `"status":"succeeded"`)
		if err != nil {
			return err
		}
		if fromNotes != items || succeeded != items {
			return fmt.Errorf("the journal has %d records settled from the notifications, %d succeeded; want %d of each", fromNotes, succeeded, items)
		}
		return nil
	}
	skipped := func(x rerunRun) error {
		if x.sum.Items != n || x.sum.Skipped != n || x.sum.Creates != 0 || x.sum.Lists != 0 || x.sum.Records != 0 {
			return fmt.Errorf("%d items: %d skipped, %d creates and %d reads, %d records; want all %d skipped, zero calls, nothing written", x.sum.Items, x.sum.Skipped, x.sum.Creates, x.sum.Lists, x.sum.Records, n)
		}
		return nil
	}
	adyenSide, stripeSide := side(settle, pending0, settleJ, settled), side(rerun, stripe0, stripeJ, skipped)
	// An untimed run of each side first: the page cache, and the checks.
	if _, err := adyenSide(); err != nil {
		return err
	}
	if _, err := stripeSide(); err != nil {
		return err
	}
	b.logf("adyen-settle: %d rounds of the settling rerun and Stripe's rerun", b.sz.Fast)
	as, ss, err := alternate(b.sz.Fast, adyenSide, stripeSide)
	if err != nil {
		return err
	}
	perSec := func(x rerunRun) float64 { return float64(x.sum.Items) / x.wall.Seconds() }
	aRate, sRate := mapRuns(as, perSec), mapRuns(ss, perSec)
	aRes, sRes := make([]result, len(as)), make([]result, len(ss))
	for i := range as {
		aRes[i] = as[i].result
	}
	for i := range ss {
		sRes[i] = ss[i].result
	}
	fsyncs := median(mapRuns(as, func(x rerunRun) float64 { return float64(x.sum.Fsyncs) }))
	r.cand = fmt.Sprintf("%.0f items/s (%.3f s), %.0f MB RSS; every item refunded, 0 API calls", median(aRate), median(seconds(aRes)), median(rssMB(aRes)))
	r.base = fmt.Sprintf("Stripe's rerun, every item skipped: %.0f items/s (%.3f s), %.0f MB", median(sRate), median(seconds(sRes)), median(rssMB(sRes)))
	r.ratio = fmt.Sprintf("%.2fx Stripe's rerun items/s", median(pairRatios(aRate, sRate)))
	r.detailf("%d rounds after an untimed run of each, the order flipped each round; each run over a fresh copy of its journal (copied before the clock starts):", b.sz.Fast)
	r.detailf("")
	r.detailf("| side | items/s (median) | runs, items/s | wall (median) | CPU (median) | peak RSS (median) | journal records written / fsyncs (median) |")
	r.detailf("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
	r.detailf("| Adyen: settle %s pending from the notifications | %.0f | %s | %.3f s | %.2f s | %.0f MB | %s / %.0f |", num(items), median(aRate), joinFloats(aRate, "%.0f"),
		median(seconds(aRes)), median(cpuSeconds(aRes)), median(rssMB(aRes)), num(int(as[0].sum.Records)), fsyncs)
	r.detailf("| Stripe: rerun of a complete journal | %.0f | %s | %.3f s | %.2f s | %.0f MB | %s / %.0f |", median(sRate), joinFloats(sRate, "%.0f"),
		median(seconds(sRes)), median(cpuSeconds(sRes)), median(rssMB(sRes)), num(int(ss[0].sum.Records)), median(mapRuns(ss, func(x rerunRun) float64 { return float64(x.sum.Fsyncs) })))
	r.detailf("")
	r.detailf("Ratio per round (Adyen / Stripe items/s): %s.", joinFloats(pairRatios(aRate, sRate), "%.2f"))
	r.detailf("")
	r.detailf("The settling run reads the journal (an intent and a pending outcome an item), reads and verifies the HMAC of every line of the %s-line notifications file, and journals a refunded outcome for each item from its REFUND notification (`\"source\":\"settled\"`); Stripe's rerun reads its journal and skips every item, writing nothing. Both ran against a loopback port where nothing listens, so any API call would have failed the run. Checked in every run: Adyen's, all %s items refunded, 0 creates, 0 payment reads, 0 notification look-ups, 0 refund reads, the journal holding %s settled, succeeded records; Stripe's, all skipped, 0 calls, 0 records.",
		num(items), num(items), num(items))
	return nil
}

// copyFile copies from to to (truncating it).
func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o600)
}
