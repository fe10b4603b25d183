package journal

import (
	"errors"
	"io"
	"io/fs"
	"runtime"

	"golang.org/x/sys/unix"
)

// Load reads the state of a journal without locking or changing it; a torn
// tail is reported, not repaired.
func Load(path string) (*State, *Torn, error) {
	f, err := journalFile.OpenRegular(path, unix.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if nf := danglingLink(path); nf != nil {
			return nil, nil, nf // a link to nothing is no empty journal
		}
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	// Only the size read now: a run appending meanwhile adds nothing half-read.
	l, err := load(io.NewSectionReader(f, 0, info.Size()), path, ReadOptions{})
	return l.state, l.torn, err
}

type loaded struct {
	state *State
	torn  *Torn
	// framed: what is kept ends in a commit line.
	framed bool
}

// load folds every record of r into a new State (workers: every core).
func load(r io.Reader, name string, opts ReadOptions) (loaded, error) {
	if opts.Workers == 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	s := NewState()
	opts.ItemHash = s.idx.HashItem
	rd := NewReader(r, name, opts)
	defer rd.Close()
	if sr, ok := r.(*io.SectionReader); ok {
		s.idx.Reserve(ItemsIn(sr.Size()))
	}
	for rd.Next() {
		s.applyRun(rd.Records(), rd.Hashes())
	}
	if err := rd.Err(); err != nil {
		return loaded{}, err
	}
	return loaded{state: s, torn: rd.Torn(), framed: rd.endsInCommit()}, nil
}

// ItemsIn estimates the items of a journal of size bytes (an intent and
// an outcome of about 250 bytes each), to size an index once.
func ItemsIn(size int64) int { return int(min(size/512, 1<<30)) }
