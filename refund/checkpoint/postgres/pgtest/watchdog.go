package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// watchdog is a small shell process that outlives this one if need be: it
// waits for EOF on a pipe whose only writer is this process, then stops the
// server (immediate) and removes its directory.
type watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File // write end; never written, only closed
}

// watchdogScript: $1 the server's dir, $2 pg_ctl, $3 the data dir.
const watchdogScript = `read -r _
"$2" stop -D "$3" -m immediate -w -t 60 >/dev/null 2>&1
rm -rf -- "$1"`

func startWatchdog(s *Server) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pgtest: watchdog pipe: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "pgtest-watchdog",
		s.dir, filepath.Join(s.bin, "pg_ctl"), s.dataDir())
	cmd.Dir = s.dir
	cmd.Env = serverEnv()
	cmd.Stdin = r
	cmd.SysProcAttr = s.owner.sysProcAttr()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("pgtest: starting the watchdog: %w", err)
	}
	return &watchdog{cmd: cmd, pipe: w}, nil
}

// release lets the watchdog finish (its work is already done by Stop) and
// reaps it.
func (wd *watchdog) release() {
	wd.pipe.Close()
	wd.cmd.Wait()
}

// sweepOrphans removes the servers of processes that are gone and whose
// watchdog did not clean up (it was killed too, or the machine went down
// under them): each dir's name carries its owner's pid.
func sweepOrphans(bin string, owner *account) {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		data := filepath.Join(dir, "data")
		if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err == nil {
			s := &Server{bin: bin, owner: owner, dir: dir}
			s.command("pg_ctl", "stop", "-D", data, "-m", "immediate", "-w", "-t", "60").Run()
		}
		os.RemoveAll(dir)
	}
}

// alive reports whether process pid exists (EPERM: it does, another
// user's).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
