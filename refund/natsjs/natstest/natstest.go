// Package natstest starts throwaway NATS servers with JetStream on
// loopback, for tests and rigs: the real nats-server binary (NATS_SERVER_BIN,
// which make test installs pinned, or nats-server on PATH), its store in a
// temp dir, killed and restarted at will on the same ports.
package natstest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Options configure a Server.
type Options struct {
	// SyncAlways sets sync_interval: always (the setting refundkit asks of
	// a single server); else the server's default (2 minutes).
	SyncAlways bool
	// Dir holds the store and the config (default: a new temp dir, removed
	// by Stop).
	Dir string
}

// Server is a running nats-server.
type Server struct {
	bin, dir, conf string
	ownDir         bool
	cmd            *exec.Cmd
	exited         chan struct{}
	Port, Monitor  int
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
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: opts.Dir}
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "natstest"); err != nil {
			return nil, err
		}
		s.ownDir = true
	}
	if s.Port, err = freePort(); err != nil {
		return nil, err
	}
	if s.Monitor, err = freePort(); err != nil {
		return nil, err
	}
	sync := ""
	if opts.SyncAlways {
		sync = "\n  sync_interval: always"
	}
	s.conf = filepath.Join(s.dir, "nats.conf")
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\njetstream {\n  store_dir: %q%s\n}\n", s.Port, s.Monitor, filepath.Join(s.dir, "js"), sync)
	if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	if err := s.start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
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
	var logs bytes.Buffer
	s.cmd = exec.Command(s.bin, "-c", s.conf)
	s.cmd.Stdout, s.cmd.Stderr = &logs, &logs
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exited = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.exited) }()
	// Ready once its monitoring address says JetStream is up (healthz
	// answers 200 only then).
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		select {
		case <-s.exited:
			return fmt.Errorf("natstest: nats-server exited: %s", logs.String())
		default:
		}
		if s.healthy() {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // polling a child's readiness, not timing a test
	}
	return fmt.Errorf("natstest: nats-server not ready within a minute: %s", logs.String())
}

func (s *Server) healthy() bool {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(s.MonitorURL() + "/healthz?js-enabled-only=true")
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
func (s *Server) Kill() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-s.exited
	return nil
}

// Restart starts the server again on the same ports and store.
func (s *Server) Restart() error { return s.start() }

// Stop ends the server and removes its temp dir.
func (s *Server) Stop() error {
	if s.cmd != nil && s.cmd.Process != nil {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(30 * time.Second):
				s.Kill()
			}
		}
	}
	if s.ownDir {
		return os.RemoveAll(s.dir)
	}
	return nil
}
