package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// A test process killed outright leaves no server behind: its watchdog
// stops the server and removes the directory.
func TestWatchdogCleansUpAfterKill(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=orphan")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %v", err)
	}
	var dir string
	var port, watchdogPid int
	if _, err := fmt.Sscan(line, &dir, &port, &watchdogPid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q: %v", line, err)
	}
	// The watchdog is not our child: a pidfd tells when it exits.
	pidfd, err := unix.PidfdOpen(watchdogPid, 0)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("pidfd_open: %v", err)
	}
	defer unix.Close(pidfd)
	orphan := &Server{dir: dir, port: port}
	connect(t, orphan.URL("postgres")).Close(context.Background()) // it is up

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 60_000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("the watchdog did not exit within a minute: %v", err)
		}
		break
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir %s after the watchdog: %v", dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := pgx.Connect(ctx, orphan.TCPURL("postgres", "postgres", "x")); err == nil || !strings.Contains(err.Error(), "refused") {
		if c != nil {
			c.Close(ctx)
		}
		t.Errorf("the orphan's port still answers: %v", err)
	}
}
