package cli

import (
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// scriptCommands are the refundkit binaries as testscript runs them: each
// is this test binary re-executed as that command, so the scripts drive real
// processes (pipes, exit codes, signals) over the same code as cmd/.
// Each command's own *_script_test.go file adds its entry in an init func.
var scriptCommands = map[string]func(){}

func TestMain(m *testing.M) {
	testscript.Main(m, scriptCommands)
}

// TestScripts runs the end-to-end suites in testdata/script at the repo root.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "../../../testdata/script",
		RequireExplicitExec: true,
		Setup:               scriptSetup,
	})
}

// scriptSetup gives every script a clean environment: no Stripe key leaks
// in from the developer's shell.
func scriptSetup(env *testscript.Env) error {
	env.Setenv("STRIPE_API_KEY", "")
	env.Setenv("STRIPE_API_BASE", "")
	return nil
}

// runAs adapts a command body to testscript's exit-by-os.Exit convention.
func runAs(run func(Env) int) func() {
	return func() { os.Exit(run(OSEnv())) }
}
