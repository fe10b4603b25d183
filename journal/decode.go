package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// syntaxError is a line that is not a JSON object: torn if last, else corrupt.
type syntaxError struct{ msg string }

func (e *syntaxError) Error() string { return e.msg }

// decodeLine parses a line strictly (unknown or repeated fields, wrong types,
// Validate): canonical lines on a fast path, the rest through encoding/json,
// to the same Record. str holds line's bytes; the fast path takes strings from it.
func decodeLine(line []byte, str string, r *Record) error {
	if ok, _ := decodeFast(line, str, r); !ok {
		return decodeJSON(line, r)
	}
	if err := r.Validate(); err != nil {
		return err
	}
	return nil
}

// DecodeLine decodes one complete line as strictly as a Scanner: the same
// Record, or an error where a Scanner refuses it. str holds the same bytes
// as line, and r's strings may share it.
func DecodeLine(line []byte, str string, r *Record) error {
	*r = Record{}
	return decodeLine(line, str, r)
}

var recordFields = [...]string{
	"v", "type", "ts", "batch", "item", "charge", "payment_intent", "capture", "psp_reference", "attempt",
	"key", "amount", "currency", "reason", "refund", "status", "source", "http_status",
	"code", "message", "final",
}

func fieldIndex(name string) int {
	for i, f := range recordFields {
		if f == name {
			return i
		}
	}
	return -1
}

// decodeJSON is the strict slow path: encoding/json alone takes keys in
// any case and repeated keys, so the keys are checked first.
func decodeJSON(line []byte, r *Record) error {
	*r = Record{}
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v)
		msg := "not JSON"
		if err != nil {
			msg = "not JSON: " + jsonMessage(err)
		}
		return &syntaxError{msg + snippet(line)}
	}
	if t := bytes.TrimLeft(line, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return &syntaxError{"not a JSON object" + snippet(line)}
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil { // '{'
		return &syntaxError{"not JSON: " + jsonMessage(err)}
	}
	var (
		seen    uint32
		version json.RawMessage
		problem string
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return &syntaxError{"not JSON: " + jsonMessage(err)}
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return &syntaxError{"not JSON: " + jsonMessage(err)}
		}
		i := fieldIndex(key)
		switch {
		case i < 0:
			if problem == "" {
				problem = fmt.Sprintf("unknown field %q", key)
			}
			continue
		case seen&(1<<i) != 0:
			if problem == "" {
				problem = fmt.Sprintf("field %q given twice", key)
			}
		}
		seen |= 1 << i
		if key == "v" {
			version = raw
		}
	}
	// The version first: a newer format may have fields this one lacks.
	if version == nil || string(version) == "null" {
		return fmt.Errorf("record without v")
	}
	var v int
	if err := json.Unmarshal(version, &v); err != nil {
		return fmt.Errorf("v %s: want an integer", version)
	}
	if v != Version {
		return &VersionError{Version: v}
	}
	if problem != "" {
		return fmt.Errorf("%s", problem)
	}
	if err := json.Unmarshal(line, r); err != nil {
		*r = Record{}
		return fmt.Errorf("%s", jsonMessage(err))
	}
	return r.Validate()
}

func jsonMessage(err error) string { return strings.TrimPrefix(err.Error(), "json: ") }

func snippet(line []byte) string {
	const max = 40
	if len(line) > max {
		return fmt.Sprintf(" in %q...", line[:max])
	}
	return fmt.Sprintf(" in %q", line)
}
