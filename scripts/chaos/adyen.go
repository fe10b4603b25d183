package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/journal"
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

func onAdyen(run func(*rig, sizes)) func(*rig, sizes) {
	return needs("adyen-webhook", onProvider(provAdyen, run))
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

// flush waits until the simulator has delivered every notification
// queued so far (the receiver answered [accepted] to each); a gateway's
// requests still running behind a 504 end first. The deadline only bounds
// a hang.
func (r *rig) flush() adyensim.NotifyStats {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := r.sim.Adyen().Flush(ctx)
	if err != nil {
		r.fatalf("flush: %v", err)
	}
	if st.Pending != 0 {
		r.fatalf("flush: %d notifications still pending", st.Pending)
	}
	return st
}

// adyenRefunds are the simulator's Adyen refunds, oldest first.
func (r *rig) adyenRefunds() []adyensim.Refund { return r.sim.Adyen().Refunds() }

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
	f, err := notes.OpenFile(r.prov.Notes, [][]byte{hmacKey()}, false)
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
