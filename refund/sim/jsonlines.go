package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
)

// Seed is a payment as a seed file or AddX gives it: Validate checks it
// alone, IDs are the kinds and ids (in pairs) no other seed may give.
type Seed interface {
	Validate() error
	IDs() []string
}

// ReadSeeds reads the seeds (what: charge, capture, payment) of a JSON
// lines file, its non-blank lines numbered from 1, each decoded by
// DecodeLine, valid, of ids not given before and, with check, checked
// against the lines before it; errors read "name:line: what is wrong".
func ReadSeeds[T any, P interface {
	*T
	Seed
}](r io.Reader, name string, maxLine int, what string, check func(*T) error) ([]T, error) {
	var out []T
	first := map[string]int{} // kind and id: the line it was given on
	each := func(line int, b []byte) error {
		var t T
		if err := DecodeLine(b, &t, what); err != nil {
			return err
		}
		if err := P(&t).Validate(); err != nil {
			return err
		}
		ids := P(&t).IDs()
		for i := 0; i < len(ids); i += 2 {
			if n, dup := first[ids[i]+"\x00"+ids[i+1]]; dup {
				return fmt.Errorf("%s %s: already given on line %d", ids[i], ids[i+1], n)
			}
			first[ids[i]+"\x00"+ids[i+1]] = line
		}
		if check != nil {
			if err := check(&t); err != nil {
				return err
			}
		}
		out = append(out, t)
		return nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	line := 0
	for sc.Scan() {
		line++
		if b := bytes.TrimSpace(sc.Bytes()); len(b) > 0 {
			if err := each(line, b); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, line, err)
			}
		}
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("%s:%d: line longer than %d bytes", name, line+1, maxLine)
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// CheckNew checks seeds to add all or none of: each valid, no id twice,
// and st holding none of their ids (their IDs' first); the caller holds
// st's lock.
func CheckNew[T any, P interface {
	*T
	Seed
}, V any](st *Store[V], what string, seeds []T) error {
	seen := map[string]bool{}
	for i := range seeds {
		if err := P(&seeds[i]).Validate(); err != nil {
			return fmt.Errorf("%s %d: %w", what, i+1, err)
		}
		ids := P(&seeds[i]).IDs()
		for j := 1; j < len(ids); j += 2 {
			if seen[ids[j]] {
				return fmt.Errorf("%s %d: %s given twice", what, i+1, ids[j])
			}
			seen[ids[j]] = true
		}
	}
	for i := range seeds {
		if id := P(&seeds[i]).IDs()[1]; st.Has(id) {
			return fmt.Errorf("%s %d: %s already exists", what, i+1, id)
		}
	}
	return nil
}

// Generate makes n seeds of 1.00 to 1000.00 drawn from seed and stream;
// mk gets each one's number, from 1.
func Generate[T any](n int, seed int64, stream uint64, mk func(num int, amount int64) T) []T {
	rng := rand.New(rand.NewPCG(uint64(seed), stream))
	out := make([]T, n)
	for i := range out {
		out[i] = mk(i+1, 100+rng.Int64N(99901))
	}
	return out
}

// DecodeLine decodes the line's one JSON object into v, strictly.
func DecodeLine(b []byte, v any, what string) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not a %s: %s", what, strings.TrimPrefix(err.Error(), "json: "))
	}
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return fmt.Errorf("not a %s: more than one JSON value on the line", what)
	}
	return nil
}

// MustJSON is v as JSON, for bodies that cannot fail to encode.
func MustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("sim: " + err.Error())
	}
	return b
}
