//go:build !linux

package main

// stopWithParent: only Linux can tell a process its parent died.
func stopWithParent() {}
