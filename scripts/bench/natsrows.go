package main

// The NATS JetStream checkpoint's rows: throughput of N refund processes
// sharing one nats-server, beside PostgreSQL and the file journal's ways to
// use the same concurrency in the same rounds, with the server's own count
// of the writes and messages an item costs; and what its operations cost
// against the real server.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs/natstest"
)

// startNATS starts a fresh nats-server with JetStream (natstest:
// loopback, sync_interval: always, as refundkit asks of fewer than 3
// replicas), its store in the work dir, for one run; stop ends it and
// removes the store.
func (b *bench) startNATS() (srv *natstest.Server, stop func(), err error) {
	dir := b.path(fmt.Sprintf("nats-%d", b.runs.Add(1)))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, nil, err
	}
	srv, err = natstest.Start(natstest.Options{SyncAlways: true, Dir: dir})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("start nats-server (natstest, sync_interval: always): %w", err)
	}
	return srv, func() { srv.Stop(); os.RemoveAll(dir) }, nil
}

// natsURL is the --journal of the checkpoint the rows use, with the
// monitoring address refund checks sync_interval at.
func natsURL(srv *natstest.Server) string {
	return srv.URL("bench") + "?monitor=" + srv.MonitorURL()
}

// natsVersion is what the nats-server binary says it is.
func natsVersion() string {
	bin, err := natstest.Binary()
	if err != nil {
		return "?"
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return bin + " (its --version failed)"
	}
	return strings.TrimSpace(string(out))
}

// natsCounts are a nats-server's counts of what its clients did.
type natsCounts struct {
	ClientMsgs int64  // /varz in_client_msgs: the messages clients sent (requests, publishes, acks)
	KVWrites   uint64 // /jsz: the key-value streams' last sequences, every write they stored
}

func (c natsCounts) minus(o natsCounts) natsCounts {
	return natsCounts{c.ClientMsgs - o.ClientMsgs, c.KVWrites - o.KVWrites}
}

// natsCountsOf reads the counts from the server's monitoring address.
func natsCountsOf(monitor string) (natsCounts, error) {
	var c natsCounts
	varz, err := getBody(monitor + "/varz")
	if err != nil {
		return c, err
	}
	if c.ClientMsgs, err = parseVarz(varz); err != nil {
		return c, err
	}
	jsz, err := getBody(monitor + "/jsz?accounts=true&streams=true")
	if err != nil {
		return c, err
	}
	c.KVWrites, err = parseJSZ(jsz)
	return c, err
}

func getBody(url string) ([]byte, error) {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// parseVarz reads in_client_msgs from a /varz answer.
func parseVarz(data []byte) (int64, error) {
	var v struct {
		InClientMsgs *int64 `json:"in_client_msgs"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return 0, fmt.Errorf("/varz: %w", err)
	}
	if v.InClientMsgs == nil {
		return 0, fmt.Errorf("/varz: no in_client_msgs (a nats-server older than 2.10?)")
	}
	return *v.InClientMsgs, nil
}

// parseJSZ sums the last sequences of the key-value buckets' streams
// (KV_*) of a /jsz?accounts=true&streams=true answer. A stream's last
// sequence counts every message it ever stored, so with history 1 it
// counts a bucket's writes, not its keys.
func parseJSZ(data []byte) (kvWrites uint64, err error) {
	var j struct {
		Accounts []struct {
			Streams []struct {
				Name  string `json:"name"`
				State struct {
					LastSeq uint64 `json:"last_seq"`
				} `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.Unmarshal(data, &j); err != nil {
		return 0, fmt.Errorf("/jsz: %w", err)
	}
	for _, a := range j.Accounts {
		for _, s := range a.Streams {
			if strings.HasPrefix(s.Name, "KV_") {
				kvWrites += s.State.LastSeq
			}
		}
	}
	return kvWrites, nil
}

func kvWritesPerItem(r simRun) float64 {
	return float64(r.nats.KVWrites) / float64(max(1, r.sum.Items))
}

func clientMsgsPerItem(r simRun) float64 {
	return float64(r.nats.ClientMsgs) / float64(max(1, r.sum.Items))
}

// natsOnSim starts a simulator and a fresh nats-server, runs n refund
// processes on one checkpoint of it at once over the same plan, checks
// every item was refunded exactly once (the summaries, the simulator, the
// checkpoint's own tally), counts what the server saw, and stops both.
func (b *bench) natsOnSim(items int, plan string, n int, simArgs []string) (simRun, error) {
	srv, stop, err := b.startNATS()
	if err != nil {
		return simRun{}, err
	}
	defer stop()
	before, err := natsCountsOf(srv.MonitorURL())
	if err != nil {
		return simRun{}, err
	}
	url := natsURL(srv)
	run, err := b.workersOn(simArgs, items, url, plan, n)
	if err != nil {
		return run, err
	}
	after, err := natsCountsOf(srv.MonitorURL())
	if err != nil {
		return run, err
	}
	run.nats = after.minus(before)
	cp, err := natsjs.Open(b.ctx, url, natsjs.Options{}, true)
	if err != nil {
		return run, err
	}
	defer cp.Close()
	infos, _, err := cp.Holders(b.ctx, []string{"B"})
	if err != nil {
		return run, err
	}
	if len(infos) != 1 || infos[0].ByStatus["refunded"] != items {
		return run, fmt.Errorf("the checkpoint's tally is %+v, want %d items of batch B refunded", infos, items)
	}
	return run, nil
}

// natsWorkers measures items/s with 1, 2, 4 and 8 refund processes on one
// NATS JetStream checkpoint (-j 8 each), beside as many on one PostgreSQL
// checkpoint and the file journal with the same concurrency in one process
// (-j 8N) and in N shard processes, against the simulator at zero latency
// and at 100 ms, all in the same rounds.
func (b *bench) natsWorkers(r *row) error {
	nats := workerSide{"NATS, N processes", "NATS",
		[]string{
			b.short("nats-server -c $WORK/nats-K/nats.conf &   # a fresh server per run (natstest): listen and http on free loopback ports; jetstream { store_dir: $WORK/nats-K/js, sync_interval: always }"),
			b.short(fmt.Sprintf("bin/refund --journal 'nats://127.0.0.1:PORT/bench?monitor=http://127.0.0.1:MONITOR' --worker wK -j %d --rate 0 --api-base $SIM_URL PLAN > /dev/null   # N at once", sharedJobs)),
		},
		func(st *workerSetting, n int) (simRun, error) { return b.natsOnSim(st.items, st.plan, n, st.simArgs) }}
	head := fmt.Sprintf("N `refund` processes sharing one NATS JetStream checkpoint (`--journal nats://...`, -j %d each; one nats-server, sync_interval: always) against N on one PostgreSQL checkpoint (fsync on), ", sharedJobs)
	cols := []perItem{{"NATS KV writes per item", kvWritesPerItem}, {"NATS messages to the server per item", clientMsgsPerItem}}
	if err := b.sharedWorkers(r, "nats", head, []workerSide{nats}, cols); err != nil {
		return err
	}
	r.detailf("Every run refunded every item exactly once (the processes' summaries and the simulator's `refunds_created`; with NATS, every item refunded in the checkpoint's tally, read back after the run; with PostgreSQL, in the items table). %s", natsNote)
	r.detailf("")
	r.detailf("%s", pgNote)
	r.detailf("")
	r.detailf("Server: %s (`NATS_SERVER_BIN`, which `make tools` installs pinned), one per run, its store in the work dir.", natsVersion())
	return nil
}

// natsNote says what the NATS columns count.
const natsNote = "The NATS columns are the server's own counts for the run (a fresh server, read from its monitoring port before the first process started and after the last one exited). KV writes per item: the growth of the key-value bucket's stream sequence over the items, every value the processes stored, the plan's load included (an item's value at load, its claim, its payment's lock taken and given up, the intent, the refund's credit key, the outcome). Messages per item: `/varz` `in_client_msgs` over the items, every message the processes sent the server (KV reads and writes, fetches from the queue, acknowledgments and renewals, JetStream API calls), most of them requests a process waits on the answer to; it grows with N because each process's load reads the whole batch (a watch of the bucket) and queues every item not settled (the server refuses those queued already: the work stream keeps one message per item). A NATS worker that finds nothing left to claim while others hold items polls the queue again after a quarter second at most, as a PostgreSQL worker does."

// natsClaimCost times the checkpoint's operations against a real
// nats-server (refund/checkpoint/natsjs in-process over loopback, sync_interval:
// always).
func (b *bench) natsClaimCost(r *row) error {
	med, err := b.claimCost(r, "the NATS JetStream checkpoint's operations (refund/checkpoint/natsjs against a local nats-server over loopback, sync_interval: always)", func() (refund.Claims, func(), error) {
		srv, stop, err := b.startNATS()
		if err != nil {
			return nil, nil, err
		}
		r.commands = append(r.commands,
			b.short("nats-server -c $WORK/nats-K/nats.conf &   # natstest: jetstream { store_dir: $WORK/nats-K/js, sync_interval: always }"),
			"go run ./scripts/bench -only nats-claim   # in-process: natsjs.Open, Load, then each operation timed one by one")
		cp, err := natsjs.Open(b.ctx, natsURL(srv), natsjs.Options{Lease: 30 * time.Second, Worker: "bench"}, false)
		if err != nil {
			stop()
			return nil, nil, err
		}
		return cp, func() { cp.Close(); stop() }, nil
	})
	if err != nil {
		return err
	}
	r.detailf("Each item a worker refunds costs a share of a Claim (a fetch from the batch's queue for as many items as it has free slots, then a read and a compare-and-set of each item's value), its payment's lock taken and given up (a read and a write each), two fenced Appends (the intent, then the outcome: a compare-and-set of the item's value, the outcome's after the refund's credit key is made) and a Release that acknowledges the message and waits for the server's confirmation: about %.1f ms of round trips at these medians, spread over the worker's -j slots. Server: %s.", med[opWhole], natsVersion())
	return nil
}
