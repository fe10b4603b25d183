package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/provider/adyen"
	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
	"github.com/refundkit/refundkit/refund/provider/adyen/webhook"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// The Adyen rows: refund --provider adyen against Adyen's API in the
// simulator, whose signed notifications go to the real receiver
// (bin/adyen-webhook), which keeps them in a file that refund reads with
// --notifications. Adyen answers a refund only "received": the item is
// journaled pending, and a later run settles it from its REFUND
// notification (refunded, or failed when success is "false"). Adyen has no
// look-up: an item in doubt is adopted when a notification names its
// refund (by its reference), else sent again under its same
// Idempotency-Key (wire.Key, attempt 1), which Adyen replays, while the
// key is younger than half of the 7 days refundkit counts on; past that
// it is left in doubt for a person.
//
// Every Adyen row ends with every notification delivered (the simulator's
// POST /_sim/adyen/flush, which waits for them: no sleep) and these
// checks: every planned item has exactly one refund at the simulator (its
// GET /_sim/adyen/refunds), of its payment, amount and currency, made
// under attempt 1's key and reference; no payment holds more live refunds
// than planned (the per-payment duplicate count); the journal names each
// item's refund (refunded; failed for a refused one); every key the
// simulator received is an attempt-1 key of a planned item with a
// journaled intent (write-ahead); the receiver kept every notification the
// simulator saw accepted (one it lost is counted as a lost record), and
// refused none; and `audit --provider adyen --notifications` names
// exactly the items the simulator says did not end refunded.

// onAdyen runs a scenario against Adyen's API, with its notifications
// kept by bin/adyen-webhook in notes.jsonl.
func onAdyen(run func(*rig, sizes)) func(*rig, sizes) {
	return func(r *rig, sz sizes) {
		if r.m.bins["adyen-webhook"] == "" {
			r.t.Skipped = "bin/adyen-webhook is not built"
			return
		}
		r.prov = provider{Name: provAdyen, Notes: r.path("notes.jsonl")}
		run(r, sz)
	}
}

// hmacKey is adyenHMACKey decoded.
func hmacKey() []byte {
	k, err := wire.ParseHMACKey(adyenHMACKey)
	if err != nil {
		panic(err)
	}
	return k
}

// receiver is bin/adyen-webhook, restarted on the same address and file
// after each kill.
type receiver struct {
	r      *rig
	out    string
	listen string // 127.0.0.1:port
	url    string // its base URL, as --addr-file gave it
	cur    *proc
	done   <-chan struct{}
	starts int
	kills  int
	// stops are the counters of each run stopped by SIGTERM.
	stops []webhookStats
}

// webhookStats are the counters adyen-webhook prints when it stops.
type webhookStats struct {
	Accepted    int64            `json:"accepted"`
	Added       int64            `json:"added"`
	Duplicates  int64            `json:"duplicates"`
	Others      int64            `json:"others"`
	Rejected    map[string]int64 `json:"rejected"`
	StoreErrors int64            `json:"store_errors"`
	NotFound    int64            `json:"not_found"`
}

// startReceiver starts the receiver on a loopback port of its own. The
// port is drawn below the kernel's ephemeral range, so that while a killed
// receiver is down no outgoing connection (nor a port-0 listener) can be
// given its port: the restart listens where the simulator posts.
func (r *rig) startReceiver() *receiver {
	low := ephemeralLow()
	base := 10000
	if low-base < 1000 {
		base = 1024
	}
	for range 20 {
		port := base + r.rng.IntN(low-base)
		rc := &receiver{r: r, out: r.prov.Notes, listen: "127.0.0.1:" + strconv.Itoa(port)}
		if rc.start() {
			r.cleanup(rc.kill)
			return rc
		}
	}
	r.fatalf("setup: adyen-webhook could not listen on any of 20 ports")
	return nil
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				return n
			}
		}
	}
	return 32768
}

// start runs the receiver and waits for its URL in a named pipe
// (--addr-file): false when it exited first because its port is taken.
func (rc *receiver) start() bool {
	r := rc.r
	rc.starts++
	fifo := r.path(fmt.Sprintf("webhook-addr-%d", rc.starts))
	r.must(syscall.Mkfifo(fifo, 0o600))
	defer os.Remove(fifo)
	got := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(fifo) // blocks until the receiver opens it
		got <- strings.TrimSpace(string(b))
	}()
	p := r.start(nil, "adyen-webhook", "--listen", rc.listen, "--out", rc.out, "--addr-file", fifo)
	done := make(chan struct{})
	go func() {
		r.wait(p)
		close(done)
	}()
	select {
	case u := <-got:
		if u != "http://"+rc.listen {
			r.fatalf("setup: adyen-webhook --listen %s published %q", rc.listen, u)
		}
		rc.url, rc.cur, rc.done = u, p, done
		return true
	case <-done:
		// Open the pipe's other end so the reader sees its end.
		go func() {
			if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				f.Close()
			}
		}()
		<-got
		if strings.Contains(p.Stderr.String(), "address already in use") {
			return false
		}
		r.fatalf("setup: adyen-webhook exited %d before listening: %s", p.Code, firstLines(p.Stderr.String(), 3))
		return false
	}
}

// kill kills the receiver with SIGKILL, if it runs, and waits for it.
func (rc *receiver) kill() {
	if rc.cur == nil {
		return
	}
	rc.cur.Cmd.Process.Kill()
	<-rc.done
	rc.cur = nil
	rc.kills++
}

// restart starts it again on the same address and file.
func (rc *receiver) restart() {
	if !rc.start() {
		rc.r.fatalf("setup: adyen-webhook could not listen on %s again", rc.listen)
	}
}

// stop stops the receiver with SIGTERM: it must exit 0 and print its
// counters, having refused no request (every notification the simulator
// posts is signed, of the one merchant account, to the one path) and
// failed no write.
func (rc *receiver) stop() {
	if rc.cur == nil {
		return
	}
	p := rc.cur
	p.Cmd.Process.Signal(syscall.SIGTERM)
	<-rc.done
	rc.cur = nil
	rc.r.expectExit(p, "adyen-webhook stopped by SIGTERM", 0)
	var st webhookStats
	if err := json.Unmarshal(p.Stdout.Bytes(), &st); err != nil {
		rc.r.t.Errorf("adyen-webhook's counters: %v: %q", err, p.Stdout.String())
		return
	}
	rc.stops = append(rc.stops, st)
	for why, n := range st.Rejected {
		if n > 0 {
			rc.r.t.Errorf("adyen-webhook refused %d requests (%s) of the simulator's signed notifications", n, why)
		}
	}
	if st.StoreErrors > 0 || st.NotFound > 0 {
		rc.r.t.Errorf("adyen-webhook: %d store errors, %d requests to another path", st.StoreErrors, st.NotFound)
	}
}

// newAdyenBatch starts the receiver and a simulator that posts to it,
// seeded with n Adyen payments, and plans batch over them as a support
// team's export: psp_reference, amount and currency (Adyen needs both),
// the whole payment, half of every 5th.
func (r *rig) newAdyenBatch(n int, faults stripesim.Faults, batch string) (*plan, *receiver) {
	rc := r.startReceiver()
	payments := adyensim.GeneratePayments(n, int64(r.seed))
	r.serveConfig(stripesim.Config{Faults: faults, Adyen: adyensim.Config{Payments: payments, APIKey: adyenAPIKey,
		MerchantAccount: adyenMerchant, NotifyURL: rc.url + webhook.DefaultPath, HMACKey: hmacKey()}})
	// Stopped before the simulator closes (cleanups run first): its last
	// posts are answered.
	r.cleanup(rc.stop)
	rows := [][]string{{"psp_reference", "amount", "currency"}}
	for i, pm := range payments {
		amount := pm.Amount
		if i%5 == 0 {
			amount /= 2
		}
		rows = append(rows, []string{pm.PSPReference, strconv.FormatInt(amount, 10), pm.Currency})
	}
	return r.makePlan("plan.jsonl", batch, r.writeCSV("payments.csv", rows)), rc
}

// adyenControl calls one of the simulator's /_sim/adyen/ endpoints and
// returns its body. Flush waits as long as notifications are pending: the
// deadline only bounds a hang.
func (r *rig) adyenControl(method, path string) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.sim.URL()+"/_sim/adyen/"+path, nil)
	r.must(err)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		r.fatalf("%s /_sim/adyen/%s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		r.fatalf("%s /_sim/adyen/%s: %d %v: %s", method, path, res.StatusCode, err, firstLines(string(b), 2))
	}
	return b
}

// flush waits until the simulator has delivered every notification
// queued so far (the receiver answered [accepted] to each); a gateway's
// requests still running behind a 504 end first.
func (r *rig) flush() adyensim.NotifyStats {
	var st adyensim.NotifyStats
	r.must(json.Unmarshal(r.adyenControl(http.MethodPost, "flush"), &st))
	if st.Pending != 0 {
		r.fatalf("flush: %d notifications still pending", st.Pending)
	}
	return st
}

// adyenRefunds are the simulator's Adyen refunds, oldest first, from its
// control endpoint.
func (r *rig) adyenRefunds() []adyensim.Refund {
	var out []adyensim.Refund
	sc := bufio.NewScanner(bytes.NewReader(r.adyenControl(http.MethodGet, "refunds")))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rf adyensim.Refund
		r.must(json.Unmarshal(sc.Bytes(), &rf))
		out = append(out, rf)
	}
	r.must(sc.Err())
	return out
}

// adyenItem names an Adyen refund's item from its reference.
func adyenItem(rf adyensim.Refund) (batch, item string, attempt int, ok bool) {
	return wire.ParseReference(rf.Reference)
}

// adyenEnd is what became of an item at the end of an Adyen row.
type adyenEnd struct {
	// bad are the items whose refund did not end refunded at Adyen, by
	// outcome (refused, failed, reversed); doubt, those left in doubt.
	bad   map[string]string
	doubt map[string]bool
	// journaled counts the items by journal status.
	journaled map[journal.Status]int
}

// checkAdyen is the end of an Adyen row, once every notification is
// delivered: see the package comment above. Items of forPerson are meant
// to be left in doubt: at most one refund each, journaled in doubt.
func (r *rig) checkAdyen(p *plan, j string, forPerson map[string]bool) adyenEnd {
	r.t.Items += len(p.Items)
	r.mean(p)
	end := adyenEnd{bad: map[string]string{}, doubt: map[string]bool{}, journaled: map[journal.Status]int{}}
	st, torn, err := journal.Load(j)
	if err != nil {
		r.fatalf("load %s after the final run: %v", j, err)
	}
	if torn != nil {
		r.t.Errorf("a torn tail is left after a clean final run: %v", torn)
	}
	byItem := map[string][]adyensim.Refund{}
	for _, rf := range r.adyenRefunds() {
		batch, item, _, ok := adyenItem(rf)
		switch {
		case !ok:
			r.t.Errorf("refund %s on %s has reference %q, not refundkit's", rf.ID, rf.Payment, rf.Reference)
			continue
		case batch != p.Batch:
			continue
		}
		if _, planned := p.lookup(item); !planned {
			r.t.Errorf("refund %s names item %s, which is not in the plan", rf.ID, item)
		}
		if rf.Status != rf.Outcome {
			r.t.Errorf("refund %s of item %s is %s, its notifications all delivered should have made it %s", rf.ID, item, rf.Status, rf.Outcome)
		}
		byItem[item] = append(byItem[item], rf)
	}
	for _, it := range p.Items {
		id := it.Item.Item
		is, _ := st.Lookup(p.Batch, id)
		end.journaled[is.Status]++
		rs := byItem[id]
		if forPerson[id] {
			end.doubt[id] = true
			if len(rs) > 1 {
				r.t.Errorf("item %s (left for a person): %d refunds (%s), want at most 1", id, len(rs), adyenIDs(rs))
			}
			if is.Status != journal.StatusInDoubt {
				r.t.Errorf("item %s: meant to be left in doubt, the journal says %v", id, is.Status)
			}
			continue
		}
		switch {
		case len(rs) == 0:
			r.t.Missing++
			r.t.Errorf("item %s: no refund at the simulator (journal: %v)", id, is.Status)
			continue
		case len(rs) > 1:
			// Live ones beyond the first are counted as duplicates per
			// payment; a refused one sent again is wrong however it ended.
			r.t.Errorf("item %s: %d refunds at the simulator (%s), want exactly 1: a refund was asked for twice", id, len(rs), adyenIDs(rs))
		}
		rf := rs[0]
		if rf.Payment != it.PSPReference || rf.Amount != it.Want || !strings.EqualFold(rf.Currency, it.Currency) {
			r.t.Errorf("item %s: refund %s is %d %s on %s, want %d %s on %s", id, rf.ID, rf.Amount, rf.Currency, rf.Payment, it.Want, it.Currency, it.PSPReference)
		}
		if _, _, attempt, _ := adyenItem(rf); attempt != 1 || rf.IdempotencyKey != wire.Key(p.Batch, id, 1) {
			r.t.Errorf("item %s: refund %s is of attempt %d under key %s, want attempt 1's", id, rf.ID, attempt, rf.IdempotencyKey)
		}
		switch rf.Outcome {
		case adyensim.OutcomeRefunded:
			if is.Status != journal.StatusRefunded || is.Refund != rf.ID {
				r.t.Errorf("item %s: refund %s was refunded, the journal says %v (%s)", id, rf.ID, is.Status, is.Refund)
			}
		case adyensim.OutcomeRefused:
			end.bad[id] = rf.Outcome
			if is.Status != journal.StatusFailed {
				r.t.Errorf("item %s: refund %s was refused (REFUND success false), the journal says %v, not failed", id, rf.ID, is.Status)
			}
		default: // failed later, reversed: refunded first, then undone
			end.bad[id] = rf.Outcome
			if !(is.Status == journal.StatusRefunded && is.Refund == rf.ID) && is.Status != journal.StatusFailed {
				r.t.Errorf("item %s: refund %s was %s after its REFUND, the journal says %v (%s), want refunded by it or failed", id, rf.ID, rf.Outcome, is.Status, is.Refund)
			}
		}
	}
	r.checkPayments()
	r.checkAdyenKeys(p, j)
	r.checkNotes()
	return end
}

func adyenIDs(rs []adyensim.Refund) string {
	ids := make([]string, len(rs))
	for i, rf := range rs {
		ids[i] = rf.ID
	}
	return strings.Join(ids, ", ")
}

// checkAdyenKeys: every Idempotency-Key the simulator received is attempt
// 1's of a planned item (no key burned, none of another batch or item),
// and an intent of the journal (or one retired) names its attempt before
// it was sent: the write-ahead rule, over Adyen's keys, which are digests.
func (r *rig) checkAdyenKeys(p *plan, j string) {
	first := make(map[string]string, len(p.Items))
	for _, it := range p.Items {
		first[wire.Key(p.Batch, it.Item.Item, 1)] = it.Item.Item
	}
	intents := map[string]bool{}
	for _, path := range append(slices.Clone(r.retired), j) {
		jr, err := crashrig.ReadJournal(path)
		if err != nil {
			r.t.Errorf("write-ahead check: %v", err)
			continue
		}
		for _, l := range jr.Lines {
			if rec := l.Record; rec.Type == journal.TypeIntent {
				intents[wire.Key(rec.Batch, rec.Item, rec.Attempt)] = true
			}
		}
	}
	for _, key := range r.sim.Keys() {
		if _, ok := first[key]; !ok {
			r.t.Errorf("the simulator received key %s, no planned item's attempt 1: a key was burned", key)
		}
		if !intents[key] {
			r.t.Errorf("the simulator received key %s, which no journaled intent names", key)
		}
	}
}

// checkNotes: the receiver's file holds every notification the simulator
// saw accepted (each refund's REFUND, and the REFUND_FAILED or
// REFUNDED_REVERSED of one failed later or reversed), each once, and none
// of a refund the simulator did not make. A notification answered
// [accepted] and not kept is a record lost.
func (r *rig) checkNotes() {
	f, err := notes.OpenFile(r.prov.Notes, hmacKey(), false)
	if err != nil {
		r.t.Errorf("open the receiver's notifications: %v", err)
		return
	}
	defer f.Close()
	all, err := f.All(context.Background())
	if err != nil {
		r.t.Errorf("read the receiver's notifications: %v", err)
		return
	}
	kept := map[string]int{}
	for i := range all {
		kept[wire.DedupKey(&all[i].Item)]++
	}
	want := map[string]bool{}
	for _, rf := range r.adyenRefunds() {
		success := "true"
		if rf.Outcome == adyensim.OutcomeRefused {
			success = "false"
		}
		events := []string{wire.EventRefund}
		switch rf.Outcome {
		case adyensim.OutcomeFailed:
			events = append(events, wire.EventRefundFailed)
		case adyensim.OutcomeReversed:
			events = append(events, wire.EventRefundReversed)
		}
		for _, ev := range events {
			key := wire.DedupKey(&wire.Item{EventCode: ev, PSPReference: rf.ID, Success: success})
			want[key] = true
			if kept[key] == 0 {
				r.t.Lost++
				r.t.Errorf("the receiver accepted %s and did not keep it", key)
			}
		}
	}
	for key, n := range kept {
		if n > 1 {
			r.t.Errorf("the receiver kept %s %d times", key, n)
		}
		if !want[key] {
			r.t.Errorf("the receiver kept %s, of no refund the simulator made", key)
		}
	}
}

// auditAdyen is the end of every Adyen row: the offline audit must report
// the items journaled failed or in doubt (exit 1), and
// `audit --provider adyen --notifications` exactly the items the
// simulator says did not end refunded (refused, failed later, reversed)
// and those left in doubt, exit 1 if any, 0 when all are clean. The audit
// column counts the runs where both agreed.
func (r *rig) auditAdyen(p *plan, j string, end adyenEnd) {
	if r.m.bins["audit"] == "" {
		return
	}
	wantOffline := 0
	if end.journaled[journal.StatusFailed]+end.journaled[journal.StatusInDoubt] > 0 {
		wantOffline = exitFailed
	}
	offline := r.run(nil, "audit", "--plan", p.Path, j)
	okOffline := r.expectExit(offline, "audit --plan (offline) after the final run", wantOffline)

	online := r.run(nil, "audit", "--provider", provAdyen, "--notifications", r.prov.Notes, "--rate", "0", "--plan", p.Path, j)
	want := map[string]string{}
	for item, why := range end.bad {
		want[item] = why
	}
	for item := range end.doubt {
		want[item] = "in doubt"
	}
	wantCode := 0
	if len(want) > 0 {
		wantCode = exitFailed
	}
	okOnline := r.expectExit(online, "audit --provider adyen --plan after the final run", wantCode)
	named := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(online.Stdout.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var f struct{ Finding, Batch, Item string }
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			r.t.Errorf("audit --provider adyen wrote %q: %v", firstLines(sc.Text(), 1), err)
			okOnline = false
			continue
		}
		named[f.Item] = append(named[f.Item], f.Finding)
		if _, ok := want[f.Item]; !ok {
			r.t.Errorf("audit --provider adyen reports %s for item %q, which the simulator says ended refunded once", f.Finding, f.Item)
			okOnline = false
		}
	}
	for item, why := range want {
		if len(named[item]) == 0 {
			r.t.Errorf("audit --provider adyen does not report item %s, whose refund ended %s", item, why)
			okOnline = false
		}
	}
	if okOffline && okOnline {
		r.t.Audits++
	}
}

// adyenRun is one refund run's summary figures the rows keep.
type adyenRun struct {
	code                    int
	summary                 summary
	ok                      bool // a summary was printed
	pending                 int
	refunded, failed, doubt int
}

func (r *rig) adyenRunOf(pr *proc) adyenRun {
	s, ok := parseSummary(pr.Stderr.String())
	return adyenRun{code: pr.Code, summary: s, ok: ok, pending: pendingCount(pr.Stderr.String()),
		refunded: s.Refunded, failed: s.Failed, doubt: s.InDoubt}
}

// settled reports a run that ended with every item refunded or failed:
// nothing pending, nothing in doubt, exit 1 if some failed, else 0.
func (a adyenRun) settled() bool {
	want := 0
	if a.failed > 0 {
		want = exitFailed
	}
	return a.ok && a.code == want && a.pending == 0 && a.doubt == 0
}

const whatAdyenKill9 = "`refund --provider adyen -j 16` over a batch of Adyen payments is killed with SIGKILL from inside the simulator's create hook, a refund call in flight: the process is gone before the simulator makes the refund (\"received\") and queues its signed REFUND notification, which it posts 50-350ms later to bin/adyen-webhook, until [accepted]. " +
	"The runs go on, each reading the receiver's file (--notifications): an item in doubt whose refund a notification names is adopted; one no notification names yet is sent again under its same Idempotency-Key, which Adyen answers by replaying the first answer; an item Adyen answered \"received\" is journaled pending, and settled refunded by a later run once its notification is in. " +
	"Once the kills are spent, every notification is delivered (POST /_sim/adyen/flush, which waits for them) before each run, until a run exits 0 with nothing pending or in doubt. Every item must end refunded in the journal by its one refund at the simulator, made under attempt 1's key, and audit --provider adyen must exit 0."

func runAdyenKill9(r *rig, sz sizes) {
	// Notifications come 50-350ms after their refund: the run after a
	// kill often finds none yet for an item it left in doubt, and sends it
	// again under its key; sometimes it finds one, and adopts the refund.
	p, rc := r.newAdyenBatch(sz.AdyenKillItems, stripesim.Faults{LatencyJitter: 2 * time.Millisecond,
		AdyenNotifyDelay: 50 * time.Millisecond, AdyenNotifyJitter: 300 * time.Millisecond}, "adyenkill9")
	j := r.path("j.jsonl")
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.AdyenKills+1))
	kills, runs, settling, adopted := 0, 0, 0, 0
	for round := 0; ; round++ {
		if round > 2*sz.AdyenKills+20 {
			r.fatalf("not done after %d runs", round)
		}
		killing := kills < sz.AdyenKills
		if !killing {
			r.flush()
			settling++
		}
		pr := r.runStruck(kill, killing, gap, j, p.Path, "-j", "16")
		runs++
		if s, ok := parseSummary(pr.Stderr.String()); ok {
			adopted += s.Reconciled
		}
		if pr.Code == -int(syscall.SIGKILL) {
			kills++
			continue
		}
		r.expectExit(pr, "a run under kill -9", 0)
		if a := r.adyenRunOf(pr); !killing && a.settled() {
			if a.failed > 0 {
				r.t.Errorf("%d items failed with no refund refused", a.failed)
			}
			break
		}
	}
	ns := r.flush()
	rc.stop()
	st := r.sim.Stats()
	r.t.inject("kill -9 with a call in flight", kills)
	r.t.note("seed %d: %d kills over %d items, %d runs (%d after a flush); %d refund calls, of which %d reserved a key; %d answers replayed to a key sent again (an item in doubt no notification named yet), %d 704s while the first call ran; %d items adopted from a notification; %d refunds made; %d notifications delivered",
		r.seed, kills, len(p.Items), runs, settling, st.Requests[r.prov.createRoute()], r.sim.Creates(), st.Adyen.Replayed, st.Adyen.KeyInUse, adopted, st.Adyen.RefundsCreated, ns.Delivered)
	end := r.checkAdyen(p, j, nil)
	if n := end.journaled[journal.StatusRefunded]; n != len(p.Items) {
		r.t.Errorf("%d of %d items journaled refunded", n, len(p.Items))
	}
	r.auditAdyen(p, j, end)
}

const whatAdyenFaults = "Adyen's refund calls are answered 429 (a tenth), 500 before the refund is made (transient: sent again with the key), 500 after it was made (saved under the key: every retry gets it, and the item waits for its notification), made and left unanswered, or answered by a gateway's 504 at once while the call goes on behind it (each a tenth); every request takes 100-250ms, so a retry may come while the first runs (704). " +
	"A tenth of the refunds are refused (REFUND success false: the item fails for good and is never sent again), a tenth fail later (REFUND_FAILED after the REFUND) and a tenth are reversed (REFUNDED_REVERSED). Notifications come 20-100ms late, a fifth twice, a fifth of the deliveries count as failed and are retried, and in every other run a refund's later notification comes before its REFUND. " +
	"`refund --provider adyen -j 16` runs are killed with SIGKILL at random refund calls; once per seed the receiver is killed with SIGKILL too, while a run goes on, and restarted on the same address and file after it (the simulator retries every notification until [accepted]). Then every notification is delivered before each run (flush) until a run ends with nothing pending or in doubt (exit 1 when items failed). " +
	"Every item must have one refund, under attempt 1's key; an item whose refund was refused must be journaled failed; one failed later or reversed may be journaled refunded (its REFUND came first) or failed, and audit --provider adyen must report exactly those items, and the refused ones (exit 1). The audit column counts the runs where both audits agreed with the simulator."

// adyenFaultLatency holds every request a little: long enough for a retry
// after a gateway's 504 to meet the call still running.
const (
	adyenLatency = 100 * time.Millisecond
	adyenJitter  = 150 * time.Millisecond
)

func runAdyenFaults(r *rig, sz sizes) {
	faults := func(reorder bool) stripesim.Faults {
		return stripesim.Faults{
			RateLimitShare: 0.1, ErrorBeforeCommitShare: 0.1, ErrorAfterCommitShare: 0.1, DropAfterCommitShare: 0.1,
			GatewayTimeoutShare: 0.1, Latency: adyenLatency, LatencyJitter: adyenJitter,
			AdyenRefundFailedShare: 0.1, AdyenRefundFailedLaterShare: 0.1, AdyenReversedShare: 0.1,
			AdyenNotifyDelay: 20 * time.Millisecond, AdyenNotifyJitter: 80 * time.Millisecond,
			AdyenNotifyDuplicateShare: 0.2, AdyenNotifyFailShare: 0.2, AdyenNotifyReorder: reorder,
		}
	}
	p, rc := r.newAdyenBatch(sz.AdyenFaultItems, faults(false), "adyenfaults")
	j := r.path("j.jsonl")
	kill := crashrig.NewStriker(syscall.SIGKILL)
	// The receiver is killed at a refund call of a killed run, no later
	// than the run's own kill, from a goroutine of its own (the call goes
	// on meanwhile), and started again once that run has ended.
	var (
		recvMu     sync.Mutex
		recvMark   int64 // 0: disarmed
		recvKilled sync.WaitGroup
	)
	disarmRecv := func() {
		recvMu.Lock()
		recvMark = 0
		recvMu.Unlock()
		recvKilled.Wait()
	}
	r.sim.OnCreate(func(n int64, key string) {
		recvMu.Lock()
		if recvMark > 0 && n >= recvMark {
			recvMark = 0
			recvKilled.Add(1)
			go func() { defer recvKilled.Done(); rc.kill() }()
		}
		recvMu.Unlock()
		kill.Hook(n, key)
	})
	r.cleanup(func() { r.sim.OnCreate(nil); disarmRecv() })
	recvRound := r.rng.IntN(max(sz.AdyenFaultRounds, 1))
	gap := max(2, len(p.Items)/(sz.AdyenFaultRounds+1))
	ends := map[int]int{}
	runs, settling := 0, 0
	for round := 0; ; round++ {
		if round > sz.AdyenFaultRounds+20 {
			r.fatalf("not done after %d runs", round)
		}
		killing := round < sz.AdyenFaultRounds
		r.must(r.sim.SetFaults(faults((round+int(r.seed))%2 == 0)))
		if !killing {
			r.flush()
			settling++
		}
		snap := crashrig.TakeSnapshot(j)
		pr := r.startRefund(j, p.Path, "-j", "16")
		base := r.sim.Creates()
		at := base + 1 + r.rng.Int64N(int64(gap))
		if killing {
			kill.ArmAt(pr.Proc, at)
		}
		if rc.kills == 0 && round >= recvRound {
			recvMu.Lock()
			recvMark = base + 1 + r.rng.Int64N(at-base)
			recvMu.Unlock()
		}
		r.wait(pr)
		kill.Disarm()
		disarmRecv()
		r.checkKept(snap)
		runs++
		if rc.cur == nil {
			rc.restart()
		}
		if r.expectExit(pr, "a run with Adyen's faults", 0, exitFailed, exitStripe, -int(syscall.SIGKILL)) {
			ends[pr.Code]++
		}
		if a := r.adyenRunOf(pr); !killing && a.settled() {
			break
		}
	}
	if rc.kills == 0 {
		r.t.Errorf("the receiver was never killed (round %d of %d)", recvRound, sz.AdyenFaultRounds)
	}
	ns := r.flush()
	rc.stop()
	st := r.sim.Stats()
	r.t.inject("429 answers", int(st.RateLimited))
	r.t.inject("500 before commit", int(st.ErrorsBeforeCommit))
	r.t.inject("500 after commit", int(st.ErrorsAfterCommit))
	r.t.inject("answers dropped after commit", int(st.Dropped))
	r.t.inject("gateway 504s while the refund went on", int(st.GatewayTimeouts))
	r.t.inject("refunds refused", int(st.Adyen.Refunds[adyensim.OutcomeRefused]))
	r.t.inject("refunds failed later", int(st.Adyen.Refunds[adyensim.OutcomeFailed]))
	r.t.inject("refunds reversed", int(st.Adyen.Refunds[adyensim.OutcomeReversed]))
	r.t.inject("notifications duplicated", int(ns.Duplicates))
	r.t.inject("notification deliveries failed and retried", int(ns.Retries))
	r.t.inject("kill -9 with a call in flight", int(kill.Struck()))
	r.t.inject("receiver kill -9, restarted", rc.kills)
	end := r.checkAdyen(p, j, nil)
	var dups int64
	for _, s := range rc.stops {
		dups += s.Duplicates
	}
	r.t.note("seed %d: %d items, %d runs (%d after a flush; %d exited 1, %d halted with exit 6, %d killed); %d 429s, %d 500s before and %d after commit, %d answers dropped, %d gateway 504s; %d 704s while the first call ran, %d answers replayed; %d refunds refused, %d failed later, %d reversed (journaled: %d refunded, %d failed); %d notifications delivered, %d duplicated, %d deliveries retried (%d failed by the knob); receiver killed %d times, %d duplicates it recognized after its last start; every key attempt 1",
		r.seed, len(p.Items), runs, settling, ends[exitFailed], ends[exitStripe], ends[-int(syscall.SIGKILL)],
		st.RateLimited, st.ErrorsBeforeCommit, st.ErrorsAfterCommit, st.Dropped, st.GatewayTimeouts, st.Adyen.KeyInUse, st.Adyen.Replayed,
		st.Adyen.Refunds[adyensim.OutcomeRefused], st.Adyen.Refunds[adyensim.OutcomeFailed], st.Adyen.Refunds[adyensim.OutcomeReversed],
		end.journaled[journal.StatusRefunded], end.journaled[journal.StatusFailed],
		ns.Delivered, ns.Duplicates, ns.Retries, ns.FailedByKnob, rc.kills, dups)
	r.auditAdyen(p, j, end)
}

const whatAdyenKeyAge = "refundkit counts on Adyen keeping an Idempotency-Key 7 days (the lower of Adyen's published figures) and sends an item in doubt again under its key only while the key is younger than half of that, unless a notification names its refund. " +
	"With the receiver down (killed: nothing new reaches the file; the simulator keeps retrying), `refund --provider adyen -j 8` is killed with SIGKILL with refund calls in flight; once they have ended at the simulator, every intent in the journal is made 4 days older. Each item then in doubt must never be sent again (no key of it reaches the simulator), whatever run comes; this repeats, and a run to the end must exit 1 counting exactly those items in doubt. " +
	"Then the receiver is restarted and every notification delivered: the rerun must adopt each item in doubt whose refund a notification names (no call), settle the pending ones, and leave in doubt only the items whose call never reached Adyen (none of which has a refund); a last rerun sends nothing. audit --provider adyen must name exactly those items (exit 1 if any)."

// adyenKeyAge is how far back the journal's intents are moved: past half
// of the 7 days refundkit counts on.
const adyenKeyAge = 4 * 24 * time.Hour

func runAdyenKeyAge(r *rig, sz sizes) {
	if adyen.KeyTTL/2 >= adyenKeyAge {
		r.fatalf("setup: intents %v old are not past half of Adyen's %v", adyenKeyAge, adyen.KeyTTL)
	}
	p, rc := r.newAdyenBatch(sz.AdyenKeyAgeItems, stripesim.Faults{LatencyJitter: time.Millisecond}, "adyenkeyage")
	j := r.path("j.jsonl")
	rc.kill() // down until every aged item has been checked
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.AdyenKeyAgeRounds+1))
	aged := map[string]bool{} // in doubt when the intents were aged: never to be sent again
	kills, runs := 0, 0
	sentFor := func(since int64) []string {
		var bad []string
		for _, key := range r.sim.KeysSince(since) {
			for item := range aged {
				if key == wire.Key(p.Batch, item, 1) {
					bad = append(bad, item)
				}
			}
		}
		return bad
	}
	for round := 0; round < sz.AdyenKeyAgeRounds+1; round++ {
		killing := round < sz.AdyenKeyAgeRounds
		since := r.sim.Creates()
		pr := r.runStruck(kill, killing, gap, j, p.Path)
		runs++
		for _, item := range sentFor(since) {
			r.t.Errorf("item %s was sent again, in doubt past half of Adyen's key window with no notification", item)
		}
		if pr.Code == -int(syscall.SIGKILL) {
			kills++
			// The killed run's calls end at the simulator first (a refund
			// made, or refused): then no call of it is still to come.
			if !await(func() bool {
				st := r.sim.Stats()
				return st.RefundsCreated+st.RefundsRefused >= r.sim.Creates()
			}, nil, time.Minute) {
				r.fatalf("the killed run's calls did not end at the simulator")
			}
			st, _, err := journal.Load(j)
			r.must(err)
			for _, it := range p.Items {
				if s, ok := st.Lookup(p.Batch, it.Item.Item); ok && s.Status == journal.StatusInDoubt {
					aged[it.Item.Item] = true
				}
			}
			r.shiftIntents(j, -adyenKeyAge)
			continue
		}
		a := r.adyenRunOf(pr)
		want := 0
		if len(aged) > 0 {
			want = exitFailed
		}
		r.expectExit(pr, "a run with items in doubt past half the key window", want)
		if !killing && (a.doubt != len(aged) || a.failed != 0) {
			r.t.Errorf("the run to the end counts %d items in doubt and %d failed; %d were in doubt past half the key window", a.doubt, a.failed, len(aged))
		}
	}
	// The notifications come in: adopted, settled; the rest stays.
	rc.restart()
	r.flush()
	live := map[string]bool{}
	for _, rf := range r.adyenRefunds() {
		if batch, item, _, ok := adyenItem(rf); ok && batch == p.Batch {
			live[item] = true
		}
	}
	forPerson := map[string]bool{}
	for item := range aged {
		if !live[item] {
			forPerson[item] = true
		}
	}
	for i, what := range []string{"the rerun once the notifications are in", "the last rerun"} {
		since := r.sim.Creates()
		snap := crashrig.TakeSnapshot(j)
		pr := r.startRefund(j, p.Path)
		r.wait(pr)
		r.checkKept(snap)
		runs++
		want := 0
		if len(forPerson) > 0 {
			want = exitFailed
		}
		r.expectExit(pr, what, want)
		a := r.adyenRunOf(pr)
		if a.doubt != len(forPerson) || a.pending != 0 {
			r.t.Errorf("%s counts %d items in doubt and %d pending; want %d in doubt (calls that never reached Adyen) and none pending", what, a.doubt, a.pending, len(forPerson))
		}
		if keys := r.sim.KeysSince(since); len(keys) > 0 {
			r.t.Errorf("%s sent %d refund calls: every item was sent, adopted or left for a person", what, len(keys))
		}
		if i == 0 {
			r.flush()
		}
	}
	ns := r.flush()
	rc.stop()
	r.t.inject("intents aged 4 days with calls in flight", kills)
	r.t.note("seed %d: %d items; %d kills with calls in flight, each followed by the journal's intents aged 4 days, the receiver down; %d items in doubt then, never sent again: %d adopted from their notification once the receiver was back, %d left in doubt (their call never reached Adyen: no refund); %d runs; %d notifications delivered",
		r.seed, len(p.Items), kills, len(aged), len(aged)-len(forPerson), len(forPerson), runs, ns.Delivered)
	end := r.checkAdyen(p, j, forPerson)
	r.auditAdyen(p, j, end)
}
