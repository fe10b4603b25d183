package journal

import "io"

// load folds every record of r into a new State.
func load(r io.Reader, name string, size int64) (*State, *Torn, error) {
	s := NewState()
	sc := NewScanner(r, name)
	for sc.Scan() {
		s.Apply(sc.Record())
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	return s, sc.Torn(), nil
}
