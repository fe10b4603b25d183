package exec

// Running one command: /bin/sh -c in a process group of its own, stdout
// kept up to a cap, stderr passed on line by line with a prefix.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Caps on what a command may print: more is not an answer.
const (
	maxCreateOutput = 64 << 10
	maxFindOutput   = 16 << 20
	maxStderrLine   = 4 << 10
)

// Exit statuses of the contract.
const (
	exitAnswered = 0
	exitTempFail = 75 // EX_TEMPFAIL (sysexits.h): retry later, same key
	exitNoPerm   = 77 // EX_NOPERM (sysexits.h): the API refused the credentials: halt
)

// waitDelay is how long a background child may hold a command's pipes.
const waitDelay = time.Second

// outcome is how one run of a command ended.
type outcome struct {
	what, payment string // "exec-create", and the payment, for messages
	stdout        []byte
	overflow      bool   // stdout went over its cap
	exit          int    // the exit status; -1 when killed or not started
	signal        string // the signal that ended it, when one did
	timedOut      bool
	timeout       time.Duration
	startErr      error // the shell could not be started: nothing ran
}

// run runs command with in on stdin and env added to the environment.
func (p *Provider) run(ctx context.Context, what, command, payment string, in []byte, env []string, limit int) outcome {
	o := outcome{what: what, payment: payment, exit: -1, timeout: p.cfg.Timeout}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	cmd := osexec.CommandContext(ctx, "/bin/sh", "-c", command)
	// A group of its own: a timeout kills the shell's children too, and a
	// Ctrl-C reaches refund alone, which finishes the calls in flight.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	// refundkit's own variables are this call's alone.
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "REFUNDKIT_") }), env...)
	cmd.Stdin = bytes.NewReader(in)
	out := &capped{limit: limit}
	cmd.Stdout = out
	errw := &lines{prefix: p.cfg.Prefix + what + " " + payment + ": ", emit: p.emit}
	cmd.Stderr = errw
	err := cmd.Run()
	errw.flush()
	o.stdout, o.overflow = out.buf.Bytes(), out.over
	if cmd.ProcessState == nil {
		o.startErr = err
		return o
	}
	// The status decides, not the clock: a command that exited on its own
	// just as the timeout struck has answered.
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled() && errors.Is(ctx.Err(), context.DeadlineExceeded):
		o.timedOut = true
	case ws.Signaled():
		o.signal = ws.Signal().String()
	default:
		o.exit = ws.ExitStatus()
	}
	return o
}

// emit writes one line of a command's stderr.
func (p *Provider) emit(line []byte) {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	p.cfg.Stderr.Write(line)
}

// capped keeps up to limit bytes and drops the rest, blocking nothing.
type capped struct {
	buf   bytes.Buffer
	limit int
	over  bool
}

func (c *capped) Write(b []byte) (int, error) {
	if room := c.limit - c.buf.Len(); len(b) > room {
		c.over = true
		c.buf.Write(b[:max(room, 0)])
		return len(b), nil
	}
	return c.buf.Write(b)
}

// lines emits a stream line by line with prefix, each cut at maxStderrLine.
type lines struct {
	prefix string
	emit   func([]byte)
	part   []byte
	long   bool // the current line was cut short already
}

func (l *lines) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			l.add(b)
			break
		}
		l.add(b[:i])
		l.end()
		b = b[i+1:]
	}
	return n, nil
}

func (l *lines) add(b []byte) {
	if room := maxStderrLine - len(l.part); len(b) > room {
		b, l.long = b[:max(room, 0)], true
	}
	l.part = append(l.part, b...)
}

func (l *lines) end() {
	line := append([]byte(l.prefix), bytes.TrimRight(l.part, "\r")...)
	if l.long {
		line = append(line, "..."...)
	}
	l.emit(append(line, '\n'))
	l.part, l.long = l.part[:0], false
}

// flush emits a last line that did not end in a newline.
func (l *lines) flush() {
	if len(l.part) > 0 || l.long {
		l.end()
	}
}

// describe says how the run ended, never the command or its environment (secrets).
func (o *outcome) describe() string {
	switch {
	case o.timedOut:
		return fmt.Sprintf("%s did not finish within %v: its process group was killed", o.what, o.timeout)
	case o.startErr != nil:
		return fmt.Sprintf("%s could not be started: %v", o.what, o.startErr)
	case o.signal != "":
		return fmt.Sprintf("%s was killed by signal %s", o.what, o.signal)
	}
	return fmt.Sprintf("%s exited %d", o.what, o.exit)
}
