package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// stopWithParent asks for SIGTERM when the parent dies, so a killed
// `go run` (which does not pass SIGTERM on) does not leave pgserver and
// its server running. If the parent is already gone, stop now.
func stopWithParent() {
	parent := os.Getppid()
	if unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0) == nil && os.Getppid() != parent {
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
}
