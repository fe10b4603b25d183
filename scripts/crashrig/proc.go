package crashrig

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Cmd says how to start a binary under test.
type Cmd struct {
	Bin   string   // path of the binary
	Args  []string // its arguments
	Dir   string   // working directory; "" for the caller's
	Stdin io.Reader
	Env   []string // the whole environment; see Env
}

// Proc is one run of a binary. Its Stdout and Stderr are safe to read once
// Wait has returned.
type Proc struct {
	Cmd    *exec.Cmd
	Stdout bytes.Buffer
	Stderr bytes.Buffer
	// Code is how it ended (see ExitCode), once Wait has returned.
	Code   int
	exited chan struct{}
}

// Env is the environment a binary under test gets: the API key, apiBase
// as STRIPE_API_BASE ("" for none), more (KEY=VALUE: PayPal's
// credentials and base, say), and the caller's environment without its
// own STRIPE_, PAYPAL_ and ADYEN_ variables.
func Env(key, apiBase string, more ...string) []string {
	env := []string{"STRIPE_API_KEY=" + key}
	if apiBase != "" {
		env = append(env, "STRIPE_API_BASE="+apiBase)
	}
	env = append(env, more...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STRIPE_") && !strings.HasPrefix(kv, "PAYPAL_") && !strings.HasPrefix(kv, "ADYEN_") {
			env = append(env, kv)
		}
	}
	return env
}

// Start starts c; it does not wait.
func Start(c Cmd) (*Proc, error) {
	p := &Proc{Cmd: exec.Command(c.Bin, c.Args...), exited: make(chan struct{})}
	p.Cmd.Dir, p.Cmd.Stdin, p.Cmd.Env = c.Dir, c.Stdin, c.Env
	p.Cmd.Stdout, p.Cmd.Stderr = &p.Stdout, &p.Stderr
	if err := p.Cmd.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// Wait waits for the process to end, as exec.Cmd's Wait does, and sets
// Code; Exited is closed once it has. Call it once.
func (p *Proc) Wait() error {
	err := p.Cmd.Wait()
	p.Code = ExitCode(err)
	close(p.exited)
	return err
}

// Exited is closed once Wait has seen the process end.
func (p *Proc) Exited() <-chan struct{} { return p.exited }
