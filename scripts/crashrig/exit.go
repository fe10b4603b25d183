package crashrig

import (
	"errors"
	"os/exec"
	"syscall"
)

// NotRun is the code of a process that could not be started or waited for.
const NotRun = -1000

// ExitCode is how a process ended, from what its Wait returned: its exit
// status, minus the signal that killed it (-9 for SIGKILL), or NotRun.
func ExitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		return NotRun
	}
	return 0
}
