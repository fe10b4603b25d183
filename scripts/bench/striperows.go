package main

// The Stripe events rows (issue 33): refunds that Stripe answers pending,
// settled on a rerun from the events the receiver (bin/webhook --stripe)
// kept meanwhile, beside the rerun that settles them by polling Stripe;
// and the receiver's own rate and fsyncs, beside BenchmarkReceiver.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/refundkit/refundkit/refund/provider/stripe"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// stripeEventsEnv is the fake signing secret of the endpoint: the
// simulator signs its events with it, the receiver and refund verify them.
// Real Stripe never sees it.
var stripeEventsEnv = []string{"STRIPE_WEBHOOK_SECRET=whsec_bench_refundkit_not_a_real_secret"}

// stripeEventsEnvShown is how the report names it.
const stripeEventsEnvShown = "STRIPE_WEBHOOK_SECRET=whsec_bench_...   # fake, set by scripts/bench, in the environment of every command below"

// stripeLookupRoutes are the simulator's routes of a look-up: what a
// pending refund costs when it is settled by asking Stripe.
var stripeLookupRoutes = []string{"GET /v1/refunds/{id}", "GET /v1/refunds", "GET /v1/charges/{id}"}

// stripeCreateRoute is the simulator's name of Stripe's refund route.
const stripeCreateRoute = "POST /v1/refunds"

// lookups sums the look-up routes' counts.
func lookups(st stripesim.Stats) int64 {
	var n int64
	for _, r := range stripeLookupRoutes {
		n += st.Requests[r]
	}
	return n
}

// stripeItems are the items of the Stripe events rows: the simulator
// rows' count, at most the session's big inputs (BENCH_ITEMS=200 makes
// them 200).
func (b *bench) stripeItems() int { return min(b.sz.SimItems, b.sz.Big) }

// stripeEventsSimArgs are the simulator's flags: every refund pending,
// settled 1 ms later, each step sent as an event to the receiver at whURL.
func (b *bench) stripeEventsSimArgs(n int, whURL string) []string {
	return []string{"--addr", "127.0.0.1:0", "--addr-file", b.path("sim.url"), "--charges", strconv.Itoa(n),
		"--stripe-pending-share", "1", "--stripe-pending-for", "1ms", "--stripe-events-url", whURL + stripe.EventsPath, "--rate-limits", "off"}
}

// stripeEventsPaths are the files of one loop.
func (b *bench) stripeEventsPaths() (journal, events string) {
	return b.path("stripe-ev-journal.jsonl"), b.path("stripe-events.jsonl")
}

// stripeLoop is one run of the whole loop: receiver, simulator, refund
// (every item answered pending), then the simulator's flush.
type stripeLoop struct {
	result         // refund's
	sum    summary // refund's summary
	// untilFlushed is from refund's start to the flush's answer: every
	// event delivered and kept by then; flushWall, the flush alone.
	untilFlushed, flushWall time.Duration
	flushed                 stripesim.EventStats // the flush's answer
	stats                   stripesim.Stats      // the simulator's, after the flush
	recv                    stripe.ReceiverStats // the receiver's, printed as it stopped
	fsyncs                  int64                // the receiver's fsyncs (perf stat); -1 when not counted
	events                  int                  // lines of the events file
	sim                     *proc                // still serving: the caller stops it
}

// eventsPerSec is events kept over refund's start to the flush's answer.
func (l *stripeLoop) eventsPerSec() float64 { return float64(l.recv.Added) / l.untilFlushed.Seconds() }

// lag is how long after refund's end the last event was kept.
func (l *stripeLoop) lag() time.Duration { return l.untilFlushed - l.wall }

// stripeEventsLoop starts the receiver (under perf stat with perf) and a
// simulator sending its events to it, refunds the plan's items with a new
// journal and events file, waits for the simulator's flush, stops the
// receiver and checks every count: every item pending with one create,
// every event delivered once and kept once, nothing refused. The
// simulator is left serving (the reruns ask it); on an error it is
// stopped.
func (b *bench) stripeEventsLoop(items int, plan string, perf bool) (_ *stripeLoop, err error) {
	l := &stripeLoop{fsyncs: -1}
	refundExe, err := b.tool("refund")
	if err != nil {
		return nil, err
	}
	whExe, err := b.tool("webhook")
	if err != nil {
		return nil, err
	}
	simExe, err := b.tool("stripe-sim")
	if err != nil {
		return nil, err
	}
	journal, events := b.stripeEventsPaths()
	removeAll(journal, events)

	argv := []string{whExe, "--listen", "127.0.0.1:0", "--stripe", events, "--addr-file", b.path("wh.url")}
	perfOut := b.path("wh-perf.out")
	os.Remove(perfOut)
	perfExe := ""
	if perf {
		perfExe, _ = b.perfPath()
	}
	if perfExe != "" {
		argv = append([]string{perfExe, "stat", "-x,", "-o", perfOut, "-e", fsyncEvents, "--"}, argv...)
	}
	wh, err := b.startProc(argv, stripeEventsEnv, b.path("wh.url"))
	if err != nil {
		return nil, err
	}
	if perfExe != "" {
		wh.perfOut = perfOut
	}
	whStopped := false
	defer func() {
		if !whStopped {
			wh.stop()
		}
	}()
	s, err := b.startProc(append([]string{simExe}, b.stripeEventsSimArgs(items, wh.url)...), stripeEventsEnv, b.path("sim.url"))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()

	c := cmdSpec{argv: append(append([]string{refundExe, "--journal", journal}, adyenFlags...), "--api-base", s.url, plan)}
	start := time.Now()
	if l.result, err = b.run(c); err != nil {
		return nil, err
	}
	if l.exit != 0 {
		return nil, fmt.Errorf("refund: exit status %d%s", l.exit, quoteStderr(l.stderr))
	}
	flushStart := time.Now()
	if l.flushed, err = b.stripeFlush(s.url); err != nil {
		return nil, err
	}
	l.flushWall = time.Since(flushStart)
	l.untilFlushed = time.Since(start)
	if l.stats, err = simStats(s.url); err != nil {
		return nil, err
	}
	wh.stop()
	whStopped = true

	if l.sum, err = parseSummary(l.stderr); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(bytes.TrimSpace(wh.stdout.Bytes()), &struct {
		Stripe *stripe.ReceiverStats `json:"stripe"`
	}{&l.recv}); err != nil {
		return nil, fmt.Errorf("webhook's counters %q: %v%s", wh.stdout.String(), err, quoteStderr(wh.stderr.String()))
	}
	if perfExe != "" {
		if l.fsyncs, err = perfFsyncs(readFile(perfOut)); err != nil {
			return nil, err
		}
	}
	if l.events, _, err = countLines(events, ""); err != nil {
		return nil, err
	}
	n := int64(items)
	pending := parsePending(l.stderr)
	var refused int64
	for _, k := range l.recv.Rejected {
		refused += k
	}
	ev := l.flushed
	switch {
	case l.sum.Items != n || pending != n:
		return nil, fmt.Errorf("refund: %d items, %d pending, %d refunded, %d failed, %d in doubt; want all %d pending", l.sum.Items, pending, l.sum.Refunded, l.sum.Failed, l.sum.InDoubt, n)
	case l.sum.Creates != n || l.stats.Requests[stripeCreateRoute] != n || l.stats.RefundsCreated != n:
		return nil, fmt.Errorf("refund made %d create calls; the simulator got %d refund requests and created %d refunds; want %d of each", l.sum.Creates, l.stats.Requests[stripeCreateRoute], l.stats.RefundsCreated, n)
	case ev.Pending != 0 || ev.PendingUntold != 0 || ev.SettlesScheduled != 0 || ev.Queued != ev.Sent || ev.Delivered != ev.Queued || ev.Sent < n || ev.ForgedAccepted != 0:
		return nil, fmt.Errorf("the flush answered %+v: want every event sent, queued and delivered once, none pending, every refund settled and told", ev)
	case l.recv.Added != ev.Delivered || l.recv.Duplicates != 0 || refused != 0 || l.recv.StoreErrors != 0 || int64(l.events) != ev.Delivered:
		return nil, fmt.Errorf("webhook kept %d events (%d duplicates, %d requests refused, %d store errors), its file has %d lines; want the %d delivered kept once, nothing refused",
			l.recv.Added, l.recv.Duplicates, refused, l.recv.StoreErrors, l.events, ev.Delivered)
	}
	l.sim = s
	return l, nil
}

// stripeFlush waits (POST /_sim/stripe/events/flush) until every pending
// refund has settled and every event is delivered, and returns the counts.
func (b *bench) stripeFlush(url string) (stripesim.EventStats, error) {
	return simFlush[stripesim.EventStats](b.ctx, url, "/_sim/stripe/events/flush")
}

// stripeEventsLoopCommands are the loop's commands, as the report shows them.
func (b *bench) stripeEventsLoopCommands(items int, plan string) []string {
	journal, events := b.stripeEventsPaths()
	return []string{
		stripeEventsEnvShown,
		b.short(fmt.Sprintf("bin/webhook --listen 127.0.0.1:0 --stripe %s --addr-file %s &   # a fresh receiver and events file per loop; counted by perf stat -x, -e %s when perf can (stripe-webhook row)", events, b.path("wh.url"), fsyncEvents)),
		b.short("bin/stripe-sim " + strings.Join(b.stripeEventsSimArgs(items, "$WH_URL"), " ") + " &   # a fresh simulator per loop"),
		b.short(fmt.Sprintf("bin/refund --journal %s %s --api-base $SIM_URL %s > /dev/null   # a new journal: every item answered pending", journal, strings.Join(adyenFlags, " "), plan)),
		"curl -X POST $SIM_URL/_sim/stripe/events/flush   # returns once every refund settled and every event is delivered and kept",
		"kill -TERM $WH_PID   # the receiver prints its counters (JSON) on stdout",
	}
}

// stripeRerun is one settling rerun and what the simulator saw of it.
type stripeRerun struct {
	result
	sum summary
	// lookups and creates are the simulator's counts during the rerun;
	// routes, every look-up route's.
	lookups, creates int64
	routes           map[string]int64
	told             int64 // refunds refund says Stripe's events settled
}

// settled are the items the rerun settled (refunded or failed).
func (x stripeRerun) settled() int64 { return x.sum.Refunded + x.sum.Failed }

func (x stripeRerun) perItem() float64 { return float64(x.lookups) / float64(max(1, x.settled())) }

func (x stripeRerun) perSec() float64 { return float64(x.settled()) / x.wall.Seconds() }

var toldRE = regexp.MustCompile(`(\d+) refunds? settled by \w+'s events`)

// parseTold reads refund's count of refunds settled by events (absent: none).
func parseTold(stderr string) int64 {
	m := toldRE.FindStringSubmatch(stderr)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// stripeSettle times the rerun that settles every pending item from the
// receiver's events beside the rerun that settles them by asking the
// simulator, over copies of one pending journal, in the same rounds.
func (b *bench) stripeSettle(r *row) error {
	items := b.stripeItems()
	r.what = fmt.Sprintf("settling %s pending Stripe refunds on a rerun: from Stripe's events kept by `webhook --stripe` (`refund --notifications`) beside polling (plain `refund`), look-ups per settled item", num(items))
	r.target = "events: 0 look-ups per settled item; polling: at least 1"
	exe, err := b.tool("refund")
	if err != nil {
		return err
	}
	plan := b.path("stripe-ev-plan.jsonl")
	journal, events := b.stripeEventsPaths()
	pending0, evJ, pollJ := b.path("stripe-pending0.jsonl"), b.path("stripe-ev-rerun.jsonl"), b.path("stripe-poll-rerun.jsonl")
	defer removeAll(plan, journal, events, pending0, evJ, pollJ)
	if err := b.gen2(r, plan, "plan", items, batch); err != nil {
		return err
	}
	r.commands = append(r.commands, "# once: the loop, its pending journal kept aside, the simulator left serving")
	r.commands = append(r.commands, b.stripeEventsLoopCommands(items, plan)...)
	b.logf("stripe-settle: the pending journal and the events of %d items", items)
	l, err := b.stripeEventsLoop(items, plan, false)
	if err != nil {
		return err
	}
	defer l.sim.stop()
	if err := os.Rename(journal, pending0); err != nil {
		return err
	}
	evCmd := cmdSpec{argv: append(append([]string{exe, "--journal", evJ}, adyenFlags...), "--api-base", l.sim.url, "--notifications", events, plan), env: stripeEventsEnv}
	pollCmd := cmdSpec{argv: append(append([]string{exe, "--journal", pollJ}, adyenFlags...), "--api-base", l.sim.url, plan)}
	shown := func(c cmdSpec) string {
		return strings.ReplaceAll(b.show(cmdSpec{argv: c.argv, stdout: c.stdout}), l.sim.url, "$SIM_URL")
	}
	r.commands = append(r.commands,
		shown(evCmd)+"   # events: over a fresh copy of the pending journal each run",
		shown(pollCmd)+"   # polling: over a fresh copy of the pending journal each run",
		"curl $SIM_URL/_sim/stats   # before and after each run: the look-ups it made")

	n := int64(items)
	side := func(c cmdSpec, to string) func() (stripeRerun, error) {
		return func() (stripeRerun, error) {
			var x stripeRerun
			if err := copyFile(pending0, to); err != nil {
				return x, err
			}
			before, err := simStats(l.sim.url)
			if err != nil {
				return x, err
			}
			if x.result, err = b.run(c); err != nil {
				return x, err
			}
			after, err := simStats(l.sim.url)
			if err != nil {
				return x, err
			}
			if x.exit != 0 {
				return x, fmt.Errorf("%s: exit status %d%s", shown(c), x.exit, quoteStderr(x.stderr))
			}
			if x.sum, err = parseSummary(x.stderr); err != nil {
				return x, err
			}
			x.lookups, x.creates = lookups(after)-lookups(before), after.Requests[stripeCreateRoute]-before.Requests[stripeCreateRoute]
			x.routes = map[string]int64{}
			for _, rt := range stripeLookupRoutes {
				x.routes[rt] = after.Requests[rt] - before.Requests[rt]
			}
			x.told = parseTold(x.stderr)
			if x.sum.Items != n || x.settled() != n || parsePending(x.stderr) != 0 || x.sum.Creates != 0 || x.creates != 0 {
				return x, fmt.Errorf("%s: %d items: %d refunded, %d failed, %d pending, %d creates (the simulator: %d); want all %d settled, no create%s",
					shown(c), x.sum.Items, x.sum.Refunded, x.sum.Failed, parsePending(x.stderr), x.sum.Creates, x.creates, n, quoteStderr(x.stderr))
			}
			return x, nil
		}
	}
	evSide, pollSide := side(evCmd, evJ), side(pollCmd, pollJ)
	// An untimed run of each side first: the page cache, and the checks.
	if _, err := evSide(); err != nil {
		return err
	}
	if _, err := pollSide(); err != nil {
		return err
	}
	b.logf("stripe-settle: %d rounds of the events rerun and the polling rerun", b.sz.Fast)
	es, ps, err := alternate(b.sz.Fast, evSide, pollSide)
	if err != nil {
		return err
	}
	wall := func(x stripeRerun) float64 { return x.wall.Seconds() }
	evWall, pollWall := mapRuns(es, wall), mapRuns(ps, wall)
	evLook, pollLook := mapRuns(es, stripeRerun.perItem), mapRuns(ps, stripeRerun.perItem)
	r.cand = fmt.Sprintf("events: %.3f s (%.0f items/s), %.2f look-ups per settled item (%s of %s settled by events)", median(evWall),
		median(mapRuns(es, stripeRerun.perSec)), median(evLook), num(int(es[0].told)), num(items))
	r.base = fmt.Sprintf("polling: %.3f s (%.0f items/s), %.2f look-ups per settled item", median(pollWall), median(mapRuns(ps, stripeRerun.perSec)), median(pollLook))
	r.ratio = fmt.Sprintf("%.2fx polling's speed (polling's wall / events' wall, per round)", median(pairRatios(pollWall, evWall)))
	r.judge(slices.Max(evLook) == 0 && slices.Min(pollLook) >= 1)

	r.detailf("The loop once (%s items, %s events sent, delivered and kept; refund's first run %.2f s, the flush %.3f s after it), then %d rounds after an untimed run of each side, the order flipped each round; each run over a fresh copy of the pending journal (copied before the clock starts), against the same simulator:",
		num(items), num(int(l.flushed.Delivered)), l.wall.Seconds(), l.flushWall.Seconds(), b.sz.Fast)
	r.detailf("")
	r.detailf("| side | wall (median) | runs, wall | items/s (median) | CPU (median) | peak RSS (median) | look-ups per settled item (median) | %s (median run) | journal records / fsyncs (median run) |",
		strings.Join(stripeLookupRoutes, " / "))
	r.detailf("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, s := range []struct {
		name string
		xs   []stripeRerun
	}{{"events: `refund --notifications`", es}, {"polling: plain `refund`", ps}} {
		w := mapRuns(s.xs, wall)
		mid := s.xs[medianIndex(w)]
		res := make([]result, len(s.xs))
		for i, x := range s.xs {
			res[i] = x.result
		}
		var rts []string
		for _, rt := range stripeLookupRoutes {
			rts = append(rts, num(int(mid.routes[rt])))
		}
		r.detailf("| %s | %.3f s | %s | %.0f | %.2f s | %.0f MB | %.2f | %s | %s / %s |", s.name, median(w), joinFloats(w, "%.3f"), median(mapRuns(s.xs, stripeRerun.perSec)),
			median(cpuSeconds(res)), median(rssMB(res)), median(mapRuns(s.xs, stripeRerun.perItem)), strings.Join(rts, " / "), num(int(mid.sum.Records)), num(int(mid.sum.Fsyncs)))
	}
	r.detailf("")
	r.detailf("Ratio per round (polling's wall / events' wall): %s.", joinFloats(pairRatios(pollWall, evWall), "%.2f"))
	r.detailf("")
	r.detailf("The simulator answers every refund pending and settles it 1 ms later, sending each step to `webhook --stripe` as Stripe does (signed, retried until answered 2xx); the flush returns once every refund settled and every event was kept. The events rerun reads and verifies every line of the %s-line events file and journals each item's outcome from its events; the polling rerun asks the simulator for each pending refund. Look-ups are the simulator's counts of %s during the run (`GET /_sim/stats` before and after), over the items the run settled. The simulator answers at once on loopback, so here a look-up costs little; at Stripe each is a round trip and counts against the rate limit (25 requests/s in test mode), which the events rerun does not spend. Checked in every run: all %s items settled, none pending, 0 creates at the simulator.",
		num(l.events), strings.Join(stripeLookupRoutes, ", "), num(items))
	return nil
}

// The stripe-webhook row: events kept per second by the receiver while
// the simulator delivers them, beside the receiver's own benchmark.

// receiverBench is BenchmarkReceiver's figures for one sub-benchmark.
type receiverBench struct {
	eventsPerSec, fsyncsPerEvent []float64
}

var (
	receiverLineRE = regexp.MustCompile(`^BenchmarkReceiver/(\w+)(?:-\d+)?\s+\d+\s+[\d.]+ ns/op`)
	eventsPerSecRE = regexp.MustCompile(`([\d.]+) events/s`)
	fsyncsEventRE  = regexp.MustCompile(`([\d.]+) fsyncs/event`)
)

// parseReceiverBench reads `go test -bench Receiver` output.
func parseReceiverBench(out string) (map[string]*receiverBench, error) {
	m := map[string]*receiverBench{}
	for _, l := range strings.Split(out, "\n") {
		sub := receiverLineRE.FindStringSubmatch(l)
		if sub == nil {
			continue
		}
		ev, fs := eventsPerSecRE.FindStringSubmatch(l), fsyncsEventRE.FindStringSubmatch(l)
		if ev == nil || fs == nil {
			return nil, fmt.Errorf("no events/s or fsyncs/event in %q", l)
		}
		if m[sub[1]] == nil {
			m[sub[1]] = &receiverBench{}
		}
		x, _ := strconv.ParseFloat(ev[1], 64)
		y, _ := strconv.ParseFloat(fs[1], 64)
		m[sub[1]].eventsPerSec = append(m[sub[1]].eventsPerSec, x)
		m[sub[1]].fsyncsPerEvent = append(m[sub[1]].fsyncsPerEvent, y)
	}
	for _, k := range []string{"serial", "parallel"} {
		if m[k] == nil {
			return nil, fmt.Errorf("no BenchmarkReceiver/%s result in the output", k)
		}
	}
	return m, nil
}

// stripeWebhook measures the receiver while the simulator delivers every
// event of a refund run (from refund's start to the flush's answer), its
// fsyncs counted by perf stat, beside BenchmarkReceiver.
func (b *bench) stripeWebhook(r *row) error {
	items := b.stripeItems()
	r.what = fmt.Sprintf("`webhook --stripe` keeping the events the simulator sends for %s refunds answered pending (from refund's start to the flush's answer), fsyncs per event", num(items))
	r.target = "group commit: fewer than one fsync per event; measured, no target"
	plan := b.path("stripe-ev-plan.jsonl")
	journal, events := b.stripeEventsPaths()
	defer removeAll(plan, journal, events, b.path("wh-perf.out"), b.path("receiver.out"))
	if err := b.gen2(r, plan, "plan", items, batch); err != nil {
		return err
	}
	r.commands = append(r.commands, b.stripeEventsLoopCommands(items, plan)...)
	_, noPerf := b.perfPath()
	b.logf("stripe-webhook: %d runs of the loop, %d items", b.sz.Slow, items)
	var runs []*stripeLoop
	for range b.sz.Slow {
		l, err := b.stripeEventsLoop(items, plan, true)
		if err != nil {
			return err
		}
		l.sim.stop()
		runs = append(runs, l)
	}

	// The unit figure: BenchmarkReceiver, in this tree's source.
	goExe, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("go is not installed: BenchmarkReceiver needs it: %v", err)
	}
	if _, err := os.Stat("refund/provider/stripe"); err != nil {
		return fmt.Errorf("BenchmarkReceiver runs in the repository's root (scripts/bench.sh runs bench there): %v", err)
	}
	count := 5
	if b.o.Quick {
		count = 2
	}
	c := cmdSpec{argv: []string{goExe, "test", "-run", "^$", "-bench", "Receiver", "-count", strconv.Itoa(count), "./refund/provider/stripe"}, stdout: b.path("receiver.out")}
	b.logf("stripe-webhook: go test -bench Receiver -count %d ./refund/provider/stripe", count)
	res, err := b.run(c)
	if err != nil {
		return err
	}
	out := readFile(c.stdout)
	if res.exit != 0 {
		return fmt.Errorf("go test -bench Receiver: exit status %d%s%s", res.exit, quoteStderr(out), quoteStderr(res.stderr))
	}
	rb, err := parseReceiverBench(out)
	if err != nil {
		return err
	}
	r.commands = append(r.commands, fmt.Sprintf("go test -run '^$' -bench Receiver -count %d ./refund/provider/stripe   # the unit figure, in the same session", count))

	rates := mapRuns(runs, (*stripeLoop).eventsPerSec)
	fsyncsPer := func(l *stripeLoop) float64 { return float64(l.fsyncs) / float64(l.recv.Added) }
	serial, par := median(rb["serial"].eventsPerSec), median(rb["parallel"].eventsPerSec)
	fsyncText := "fsyncs not counted (" + noPerf + ")"
	if runs[0].fsyncs >= 0 {
		fsyncText = fmt.Sprintf("%.3f fsyncs per event (%.1f events per fsync)", median(mapRuns(runs, fsyncsPer)), 1/median(mapRuns(runs, fsyncsPer)))
	}
	r.cand = fmt.Sprintf("%.0f events kept/s, the last %.3f s after refund ended; %s", median(rates), median(mapRuns(runs, func(l *stripeLoop) float64 { return l.lag().Seconds() })), fsyncText)
	r.base = fmt.Sprintf("BenchmarkReceiver: serial %.0f events/s (%.2f fsyncs/event), parallel %.0f events/s (%.3f fsyncs/event)",
		serial, median(rb["serial"].fsyncsPerEvent), par, median(rb["parallel"].fsyncsPerEvent))
	r.ratio = fmt.Sprintf("%.2fx the serial rate, %.2fx the parallel", median(rates)/serial, median(rates)/par)
	if runs[0].fsyncs >= 0 {
		r.ratio = fmt.Sprintf("%.1f events per fsync (BenchmarkReceiver: serial %.1f, parallel %.1f); %s", 1/median(mapRuns(runs, fsyncsPer)),
			1/median(rb["serial"].fsyncsPerEvent), 1/median(rb["parallel"].fsyncsPerEvent), r.ratio)
	}
	r.detailf("%d runs, a fresh receiver, events file, simulator and journal per run:", b.sz.Slow)
	r.detailf("")
	r.detailf("| run | refund's wall | refund's start to the flush's answer | the flush | events kept | events per item | kept/s | receiver's fsyncs | fsyncs per event | simulator's retries |")
	r.detailf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for i, l := range runs {
		fs, per := "not counted", "-"
		if l.fsyncs >= 0 {
			fs, per = num(int(l.fsyncs)), fmt.Sprintf("%.3f", fsyncsPer(l))
		}
		r.detailf("| %d | %.2f s | %.2f s | %.3f s | %s | %.1f | %.0f | %s | %s | %d |", i+1, l.wall.Seconds(), l.untilFlushed.Seconds(), l.flushWall.Seconds(),
			num(int(l.recv.Added)), float64(l.recv.Added)/float64(items), l.eventsPerSec(), fs, per, l.flushed.Retries)
	}
	r.detailf("")
	r.detailf("BenchmarkReceiver (`refund/provider/stripe`, in-process: a signed event verified, read and kept in a file in the test's temp dir, answered 200), %d runs each, medians:", count)
	r.detailf("")
	r.detailf("| sub-benchmark | events/s (median) | runs, events/s | fsyncs/event (median) |")
	r.detailf("| --- | ---: | --- | ---: |")
	for _, k := range []string{"serial", "parallel"} {
		r.detailf("| %s | %.0f | %s | %.3f |", k, median(rb[k].eventsPerSec), joinFloats(rb[k].eventsPerSec, "%.0f"), median(rb[k].fsyncsPerEvent))
	}
	r.detailf("")
	r.detailf("Kept/s is the events the receiver kept over the time from refund's start to the flush's answer, so it is bound by how fast refund makes the refunds the events are about and by the simulator's senders (4 at once): the receiver keeps up when the last event lands soon after refund ends. The receiver's counters (`accepted`, `added`, ...) carry no fsync count: its fsyncs are perf stat's count of its fsync and fdatasync calls, for the whole process (the directory's too, once, when the events file is created). Serial is one event at a time (one fsync each), parallel 8 goroutines per core posting at once (their Adds share fsyncs). Checked in every run: every item pending after refund, every event sent, delivered once and kept once (the flush's and the receiver's counters, the file's lines), nothing refused, every refund settled and told.")
	return nil
}
