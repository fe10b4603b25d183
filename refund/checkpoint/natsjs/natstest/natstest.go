// Package natstest starts throwaway nats-servers with JetStream on loopback
// for tests and rigs (NATS_SERVER_BIN, or nats-server on PATH), killed and
// restarted at will on the same ports; StartCluster routes several into one.
package natstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options configure a Server.
type Options struct {
	SyncAlways bool   // sync_interval: always, as refundkit asks of one server
	Dir        string // the store and config (default: a temp dir Stop removes)
}

// Server is a running nats-server.
type Server struct {
	bin, dir, conf string
	ownDir         bool
	cmd            *exec.Cmd
	exited         chan struct{}
	logs           *lockedBuffer
	Port, Monitor  int
	Name           string // a cluster node's server_name; "" alone
	ClusterPort    int
}

// Binary is the nats-server to run: NATS_SERVER_BIN, else nats-server on
// PATH.
func Binary() (string, error) {
	if bin := os.Getenv("NATS_SERVER_BIN"); bin != "" {
		return bin, nil
	}
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		return "", errors.New("natstest: no nats-server: make test installs it (bin/tools/nats-server), or set NATS_SERVER_BIN")
	}
	return bin, nil
}

// Start starts a server on free loopback ports and waits until it serves.
func Start(opts Options) (*Server, error) {
	s, err := newServer(opts.Dir, false)
	if err != nil {
		return nil, err
	}
	if err := s.writeConf(opts.SyncAlways, ""); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// newServer picks a server's binary, dir and ports (a route port too for
// a cluster node); it starts nothing.
func newServer(dir string, clustered bool) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	if s.dir, s.ownDir, err = makeDir(dir, "natstest"); err != nil {
		return nil, err
	}
	ports := []*int{&s.Port, &s.Monitor}
	if clustered {
		ports = append(ports, &s.ClusterPort)
	}
	for _, p := range ports {
		if *p, err = freePort(); err != nil {
			s.Stop()
			return nil, err
		}
	}
	return s, nil
}

// writeConf writes the server's config; cluster is its cluster block,
// "" for a server alone.
func (s *Server) writeConf(syncAlways bool, cluster string) error {
	var b strings.Builder
	if s.Name != "" {
		fmt.Fprintf(&b, "server_name: %s\n", s.Name)
	}
	fmt.Fprintf(&b, "listen: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n", s.Port, s.Monitor, filepath.Join(s.dir, "js"))
	if syncAlways {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	b.WriteString(cluster)
	s.conf = filepath.Join(s.dir, "nats.conf")
	return os.WriteFile(s.conf, []byte(b.String()), 0o600)
}

// makeDir makes dir, or a temp dir (own) when dir is "".
func makeDir(dir, pattern string) (_ string, own bool, err error) {
	if dir == "" {
		dir, err = os.MkdirTemp("", pattern)
		return dir, true, err
	}
	return dir, false, os.MkdirAll(dir, 0o700)
}

// freePort is a loopback port free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	if err := s.spawn(); err != nil {
		return err
	}
	return s.awaitReadyBy(time.Now().Add(60 * time.Second))
}

// spawn starts the process; it does not wait for it to serve.
func (s *Server) spawn() error {
	s.logs = new(lockedBuffer)
	s.cmd = exec.Command(s.bin, "-c", s.conf)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exited = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.exited) }()
	return nil
}

// awaitReadyBy waits until deadline for the server's monitoring address to
// say JetStream is up: healthz answers 200 only then, a cluster node's only
// once the cluster has a meta leader.
func (s *Server) awaitReadyBy(deadline time.Time) error {
	for time.Now().Before(deadline) {
		if !s.Running() {
			return fmt.Errorf("natstest: nats-server exited: %s", s.logs.String())
		}
		if s.healthy() {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // polling a child's readiness, not timing a test
	}
	return fmt.Errorf("natstest: nats-server not ready in time: %s", s.logs.String())
}

// lockedBuffer is the server's output: written by the process's copier,
// read by an error message, so guarded.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (s *Server) healthy() bool {
	path := "/healthz?js-enabled-only=true"
	if s.Name != "" {
		path = "/healthz"
	}
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(s.MonitorURL() + path)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// URL is the nats:// URL of checkpoint name on this server.
func (s *Server) URL(name string) string {
	return fmt.Sprintf("nats://127.0.0.1:%d/%s", s.Port, name)
}

// MonitorURL is the server's monitoring address.
func (s *Server) MonitorURL() string { return fmt.Sprintf("http://127.0.0.1:%d", s.Monitor) }

// Kill kills the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() error { return s.signal(syscall.SIGKILL) }

// Shutdown stops the server cleanly (SIGTERM) and waits for it to exit;
// its store stays, for Restart.
func (s *Server) Shutdown() error { return s.signal(syscall.SIGTERM) }

func (s *Server) signal(sig syscall.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	if err := s.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-s.exited
	return nil
}

// Running reports whether the server's process has not exited.
func (s *Server) Running() bool {
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Restart starts the server again on the same ports and store.
func (s *Server) Restart() error { return s.start() }

// Stop ends the server and removes its temp dir.
func (s *Server) Stop() error {
	if s.Running() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			s.Kill()
		}
	}
	if s.ownDir {
		return os.RemoveAll(s.dir)
	}
	return nil
}

// ClusterOptions configure a Cluster.
type ClusterOptions struct {
	Nodes      int    // default 3: 3 replicas keep their writes through the loss of one
	SyncAlways bool   // sync_interval: always on every node
	Dir        string // a directory per node (default: a temp dir Stop removes)
}

// Cluster is nodes of one JetStream cluster on loopback, each with its own
// store and ports, routed to every other.
type Cluster struct {
	Nodes  []*Server
	dir    string
	ownDir bool
}

// StartCluster starts the nodes of a cluster and waits until every one
// serves JetStream (a meta leader is elected).
func StartCluster(opts ClusterOptions) (*Cluster, error) {
	if opts.Nodes <= 0 {
		opts.Nodes = 3
	}
	c := &Cluster{}
	var err error
	if c.dir, c.ownDir, err = makeDir(opts.Dir, "natstest-cluster"); err != nil {
		return nil, err
	}
	// A cluster that has not elected its meta leader in time (a port
	// taken between its choice and its bind, a machine too busy for the
	// election's timers) is started again on new ports: 3 tries.
	for try := 1; try <= 3; try++ {
		if err = c.start(opts, try); err == nil {
			return c, nil
		}
		for _, s := range c.Nodes {
			s.Kill()
		}
		c.Nodes = nil
	}
	c.Stop()
	return nil, err
}

// start makes and starts the nodes of try, and waits for all to serve.
func (c *Cluster) start(opts ClusterOptions, try int) error {
	for i := range opts.Nodes {
		s, err := newServer(filepath.Join(c.dir, fmt.Sprintf("try%d", try), fmt.Sprintf("n%d", i+1)), true)
		if err != nil {
			return err
		}
		s.Name = fmt.Sprintf("n%d", i+1)
		c.Nodes = append(c.Nodes, s)
	}
	var routes []string
	for _, s := range c.Nodes {
		routes = append(routes, fmt.Sprintf("    nats-route://127.0.0.1:%d", s.ClusterPort))
	}
	for _, s := range c.Nodes {
		block := fmt.Sprintf("cluster {\n  name: natstest\n  listen: 127.0.0.1:%d\n  routes: [\n%s\n  ]\n}\n", s.ClusterPort, strings.Join(routes, "\n"))
		if err := s.writeConf(opts.SyncAlways, block); err != nil {
			return err
		}
	}
	// All at once: a node alone has no quorum, and is not ready until the
	// others are up.
	for _, s := range c.Nodes {
		if err := s.spawn(); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(45 * time.Second)
	for _, s := range c.Nodes {
		if err := s.awaitReadyBy(deadline); err != nil {
			return fmt.Errorf("node %s (try %d): %w", s.Name, try, err)
		}
	}
	return nil
}

// URL is the nats:// URL of checkpoint name naming every node: a client
// goes on with another when one is down.
func (c *Cluster) URL(name string) string { return "nats://" + c.hosts("") + "/" + name }

// Servers is the nodes' client URLs as nats.Connect takes them.
func (c *Cluster) Servers() string { return c.hosts("nats://") }

func (c *Cluster) hosts(scheme string) string {
	hosts := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		hosts[i] = fmt.Sprintf("%s127.0.0.1:%d", scheme, s.Port)
	}
	return strings.Join(hosts, ",")
}

// streamInfo asks any node that answers about stream.
func (c *Cluster) streamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	nc, err := nats.Connect(c.Servers(), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return st.Info(ctx)
}

// Leader is the index in Nodes of the node that leads stream now, asked
// of any node that answers.
func (c *Cluster) Leader(ctx context.Context, stream string) (int, error) {
	info, err := c.streamInfo(ctx, stream)
	if err != nil {
		return -1, err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return -1, fmt.Errorf("natstest: stream %s has no leader now", stream)
	}
	for i, s := range c.Nodes {
		if s.Name == info.Cluster.Leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("natstest: stream %s is led by %q, not a node of this cluster", stream, info.Cluster.Leader)
}

// AwaitCurrent waits until node leads stream or is one of its replicas
// caught up with the leader (a restarted node is ready before it caught
// up), or until ctx is done.
func (c *Cluster) AwaitCurrent(ctx context.Context, stream string, node int) error {
	name := c.Nodes[node].Name
	for {
		info, err := c.streamInfo(ctx, stream)
		if err == nil && info.Cluster != nil {
			if info.Cluster.Leader == name {
				return nil
			}
			for _, p := range info.Cluster.Replicas {
				if p.Name == name && p.Current {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natstest: node %s not current on stream %s: %v (last: %v)", name, stream, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond): // polling the cluster's state, not timing a test
		}
	}
}

// Stop ends every node and removes the temp dir.
func (c *Cluster) Stop() error {
	var first error
	for _, s := range c.Nodes {
		if err := s.Stop(); err != nil && first == nil {
			first = err
		}
	}
	if c.ownDir {
		if err := os.RemoveAll(c.dir); err != nil && first == nil {
			first = err
		}
	}
	return first
}
