package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ReadJSONLines calls each with every non-blank line of a seed file,
// trimmed and numbered from 1; errors read "name:line: what is wrong".
func ReadJSONLines(r io.Reader, name string, maxLine int, each func(line int, b []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := each(line, b); err != nil {
			return fmt.Errorf("%s:%d: %w", name, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%s:%d: line longer than %d bytes", name, line+1, maxLine)
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// ReadSeeds reads the seeds (what: charge, capture, payment) of a JSON
// lines file, each decoded by DecodeLine and checked by check.
func ReadSeeds[T any](r io.Reader, name string, maxLine int, what string, check func(line int, t *T) error) ([]T, error) {
	var out []T
	err := ReadJSONLines(r, name, maxLine, func(line int, b []byte) error {
		var t T
		if err := DecodeLine(b, &t, what); err != nil {
			return err
		}
		if err := check(line, &t); err != nil {
			return err
		}
		out = append(out, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// FirstLines are the lines ids were first given on, in a seed file.
type FirstLines map[string]int

// Once notes id (of kind) on line, or reports the line it was given on.
func (m FirstLines) Once(kind, id string, line int) error {
	if first, dup := m[kind+"\x00"+id]; dup {
		return fmt.Errorf("%s %s: already given on line %d", kind, id, first)
	}
	m[kind+"\x00"+id] = line
	return nil
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
