package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// scriptCommands are the refundkit binaries as testscript runs them: each
// is this test binary re-executed as that command, so the scripts drive real
// processes (pipes, exit codes, signals) over the same code as cmd/.
// Each command's own *_script_test.go file adds its entry in an init func.
var scriptCommands = map[string]func(){}

func TestMain(m *testing.M) {
	testscript.Main(stopPostgresAfter{m}, scriptCommands)
}

// TestScripts runs the end-to-end suites in testdata/script at the repo root.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "../../../testdata/script",
		RequireExplicitExec: true,
		Setup:               scriptSetup,
		Cmds: map[string]func(*testscript.TestScript, bool, []string){
			"sim":       cmdSim,
			"exit":      cmdExitCode,
			"readurl":   cmdReadURL,   // a server's URL from its --addr-file pipe (adyen_webhook.txtar)
			"jsonlines": cmdJSONLines, // every line of stdout or stderr a JSON object (log_json.txtar)
		},
	})
}

// scriptSetup gives every script a clean environment, no Stripe key from
// the developer's shell, and a Stripe simulator of its own on loopback that
// STRIPE_API_BASE and a test key point at; EXECDIR names the example exec
// commands (testdata/exec).
func scriptSetup(env *testscript.Env) error {
	env.Setenv("STRIPE_API_KEY", scriptKey)
	dir, err := filepath.Abs("../../../testdata/exec")
	if err != nil {
		return err
	}
	env.Setenv("EXECDIR", dir)
	return startScriptSim(env)
}

// runAs adapts a command body to testscript's exit-by-os.Exit convention.
func runAs(run func(Env) int) func() {
	return func() { os.Exit(run(OSEnv())) }
}

// cmdExitCode runs a command and asserts its exact exit code, which plain
// `exec` and `! exec` cannot: `exit 2 refund --journal j.jsonl`. Its stdout
// and stderr are kept for the `stdout` and `stderr` checks that follow.
func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exit CODE command [args...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("%s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}
