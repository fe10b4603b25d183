package cli

import (
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a CPU profile to path until the returned func is
// called: the benchmarks use it to show where a run spends its time.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
