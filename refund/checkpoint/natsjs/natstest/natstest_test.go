package natstest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestClusterLosesItsLeader: a stream of 3 replicas on a 3-node cluster
// keeps taking writes after its leader is killed -9 (another leads), and
// the node restarted on its store catches up with what was written while
// it was down.
func TestClusterLosesItsLeader(t *testing.T) {
	c, err := StartCluster(ClusterOptions{})
	if err != nil {
		t.Fatalf("the NATS tests need nats-server (make test installs it): %v", err)
	}
	defer c.Stop()
	if n := strings.Count(c.URL("x"), ","); n != 2 {
		t.Fatalf("URL %s names %d servers, want 3", c.URL("x"), n+1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc, err := nats.Connect(c.Servers(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "s", Subjects: []string{"s.>"}, Replicas: 3, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	sent := 0
	publish := func(n int) {
		t.Helper()
		for range n {
			sent++
			// Its id makes a try again of one the server stored, unanswered,
			// the same message (JetStream's dedup window), not a second.
			id := jetstream.WithMsgID(strconv.Itoa(sent))
			// A write may meet the election, or go out on the connection
			// to the node killed and never be answered: each try is given
			// a few seconds (not the whole test's time), and asked again
			// until it is stored.
			for {
				try, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := js.Publish(try, "s.a", []byte("x"), id)
				cancel()
				if err == nil {
					break
				} else if ctx.Err() != nil {
					t.Fatalf("publish: %v", err)
				}
			}
		}
	}
	publish(10)
	lead, err := c.Leader(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Nodes[lead].Kill(); err != nil {
		t.Fatal(err)
	}
	if c.Nodes[lead].Running() {
		t.Fatal("the killed node still runs")
	}
	publish(10)
	next, err := c.Leader(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if next == lead {
		t.Fatalf("node %d, killed, still leads", lead)
	}
	if err := c.Nodes[lead].Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.AwaitCurrent(ctx, "s", lead); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 20 {
		t.Errorf("the stream holds %d messages, want 20", info.State.Msgs)
	}
}
