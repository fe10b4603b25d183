package main

// The NATS JetStream rows: many `refund` workers share one checkpoint
// (`--journal nats://host:port/NAME`), pulling items from its work queue,
// each message's ack-wait the lease of its claim, while workers die, stop,
// come and go, the server is killed, the provider misbehaves and the
// operator gets the plan or the URL wrong. The rows of shared.go and
// sharedops.go run here as on PostgreSQL; the operator rows are NATS's own.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs/natstest"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// natsCheckpoint is a checkpoint NAME on the rig's NATS server, and the
// rig's own read-only view of it.
type natsCheckpoint struct {
	srv  *natstest.Server
	name string

	mu sync.Mutex
	rd *natsjs.Checkpoint // reopened after the server restarts
}

// onNATS runs a shared row on NATS JetStream.
func onNATS(run func(*rig, sizes)) func(*rig, sizes) { return onShared(openNATS, run) }

// natsServer is the rig's NATS server, started on first use with
// sync_interval: always (what refundkit asks of a single server), its
// store in a temp dir of its own: each row and seed gets a fresh one.
func (r *rig) natsServer() *natstest.Server {
	if r.natsSrv == nil {
		srv, err := natstest.Start(natstest.Options{SyncAlways: true})
		if err != nil {
			r.fatalf("setup: the NATS rows need nats-server: make test installs it (bin/tools/nats-server), or set NATS_SERVER_BIN: %v", err)
		}
		r.cleanup(func() { srv.Stop() })
		r.natsSrv = srv
	}
	return r.natsSrv
}

// openNATS opens checkpoint name on the rig's server: its bucket and work
// stream made by the rig, so that its reader finds them before any worker
// has run (a reader makes none).
func openNATS(r *rig, name string) sharedCheckpoint {
	c := &natsCheckpoint{srv: r.natsServer(), name: name}
	w, err := natsjs.Open(context.Background(), c.url(), natsjs.Options{Worker: "chaos-rig"}, false)
	r.must(err)
	r.must(w.Close())
	r.must(c.reopen())
	r.cleanup(func() { c.reader().Close() })
	return c
}

// url names the server's monitoring address, so that workers check its
// sync_interval.
func (c *natsCheckpoint) url() string {
	return c.srv.URL(c.name) + "?monitor=" + c.srv.MonitorURL()
}

func (c *natsCheckpoint) reader() *natsjs.Checkpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rd
}

func (c *natsCheckpoint) reopen() error {
	rd, err := natsjs.Open(context.Background(), c.url(), natsjs.Options{}, true)
	if err != nil {
		return err
	}
	c.mu.Lock()
	old := c.rd
	c.rd = rd
	c.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// claim is the item's last claim, live unless the item was given back or
// settled.
func (c *natsCheckpoint) claim(batch, item string) (itemClaim, error) {
	info, ok, err := c.reader().Inspect(context.Background(), batch, item)
	if err != nil {
		return itemClaim{}, err
	}
	if !ok {
		return itemClaim{}, fmt.Errorf("the checkpoint holds no item %s of batch %s", item, batch)
	}
	cl := itemClaim{Gen: info.Gen}
	if !info.Released && info.Status != "refunded" && info.Status != "failed" {
		cl.Worker = info.Worker
	}
	return cl, nil
}

func (c *natsCheckpoint) unrefunded(batch string) (int, error) {
	infos, _, err := c.reader().Holders(context.Background(), []string{batch})
	if err != nil {
		return 0, err
	}
	if len(infos) != 1 {
		return 0, fmt.Errorf("the checkpoint holds %d plans of batch %s", len(infos), batch)
	}
	return int(infos[0].Items) - infos[0].ByStatus["refunded"], nil
}

// snapshot names each record by its item and its place among the item's
// records: an item's value is rewritten whole on every write, and must
// keep the records it held.
func (c *natsCheckpoint) snapshot() (recordSnapshot, error) {
	var b bytes.Buffer
	if err := c.exportTo(&b); err != nil {
		return nil, err
	}
	j := crashrig.ParseJournal("the export", b.Bytes())
	if j.Err != nil {
		return nil, j.Err
	}
	s := recordSnapshot{}
	seen := map[[2]string]int{}
	for _, l := range j.Lines {
		k := [2]string{l.Record.Batch, l.Record.Item}
		s[fmt.Sprintf("%q %q %d", k[0], k[1], seen[k])] = string(j.Data[l.Start:l.End])
		seen[k]++
	}
	return s, nil
}

func (c *natsCheckpoint) exportTo(w io.Writer, batches ...string) error {
	_, _, err := c.reader().Export(context.Background(), w, batches)
	return err
}

func (c *natsCheckpoint) export(path string, batches ...string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := c.exportTo(f, batches...); err != nil {
		return err
	}
	return f.Close()
}

// down kills the server (SIGKILL) or stops it cleanly (SIGTERM).
func (c *natsCheckpoint) down(crash bool) error {
	if crash {
		return c.srv.Kill()
	}
	return c.srv.Shutdown()
}

func (c *natsCheckpoint) up() error {
	if err := c.srv.Restart(); err != nil {
		return err
	}
	return c.reopen()
}

// natsDown is how nats-restart takes the server down. A worker whose write
// the server did not answer halts with exit 3; one whose items were left
// in doubt by it exits 1.
var natsDown = serverDown{crash: "server kill -9", stop: "server clean shutdowns (SIGTERM)", again: []int{exitJournal, exitFailed}}

const whatNATSKill9 = "Four `refund -j 8` workers share one NATS JetStream checkpoint (`--journal nats://.../NAME?monitor=... --lease 3s`; the server has `sync_interval: always`) and are killed with SIGKILL again and again, each killed one replaced by a new worker until every worker has exited 0. " +
	"Half the kills come from inside the simulator's create hook: the worker whose claim the checkpoint shows for the item being refunded is killed with its call in flight, and the simulator commits the refund after it is gone; the other half hit a random live worker at a random time. " +
	"The dead worker's messages go to the others once their ack-wait (the lease) runs out, and each item is looked up before anything is sent. Before each kill the checkpoint's records are snapshotted and must all be there, unchanged, after; at the end the checkpoint, exported as journal lines, must account for every refund at the simulator."

const whatNATSSigstop = "Three `refund -j 4` workers on one NATS checkpoint (`--lease 2s`, the queue's ack-wait). Inside the simulator's create hook, the worker holding the item's claim is stopped with SIGSTOP, its call in flight (the simulator commits the refund; the answer waits for a stopped process). " +
	"The rig waits until the checkpoint shows the item claimed by another worker (its claim generation moved on: the stop outlasted the ack-wait and the server redelivered the message), then resumes the worker with SIGCONT: it must find its claim lost (its write fenced by the item's revision) and halt with exit 3, saying the claim was lost, writing and sending nothing more; a new worker replaces it. " +
	"The item's new holder looks it up and finds the refund, so nothing is refunded twice. "

const whatNATSRestart = "Four `refund -j 8` workers on one NATS checkpoint (`--lease 2s`); inside the simulator's create hook, with calls in flight, the server goes down: killed with SIGKILL and stopped cleanly (SIGTERM), in turn. " +
	"It stays down for 0.2 to 1.5 s, then starts again on the same store and ports. A worker whose write or claim the server did not answer halts with exit 3, having sent nothing after the failed write (one that left items in doubt exits 1); one that was waiting may ride it out. Halted workers are replaced once the server is up, until every worker has exited 0. " +
	"Every record the checkpoint held when the server went down must be there after it came back (a file stream's write reaches the operating system before it is acknowledged), and at the end every refund at the simulator recorded as refunded."

const whatNATSFaults = "Four `refund -j 8` workers on one NATS checkpoint against a simulator that answers a share of refund creations 500 without a refund (0.1), 500 after committing it (0.1), commits and drops the answer (0.1), answers a gateway's 504 at once while the request goes on behind it (0.1), and answers a fifth of all requests 429. " +
	"Rounds of four workers run until one round ends with every worker at exit 0 (exit 1, items left in doubt and given back to the queue, and exit 6, the provider not answering, are accepted on the way); the simulator forgets every idempotency key after each round, so items left in doubt are found by their look-up, not by a replay. Then the faults stop, a round runs, and if items Stripe answered its own 500 for are still in doubt (exit 1), a round with `--resend-after-500` must end them all at exit 0."

const whatNATSReshard = "Workers come and go on one NATS checkpoint (`--lease 3s`, `-j 8` each): one worker starts the batch; at a fifth of the refund calls three more join it; at half, one of those is stopped with SIGTERM (it must finish its calls in flight, give back what it claimed and exit 143) and another is killed with SIGKILL (its messages go to the others when their ack-wait runs out). " +
	"The two left must finish the batch with exit 0 (the items the stopped worker gave back are delivered to them at once), and a worker started after them must find nothing left and exit 0."
