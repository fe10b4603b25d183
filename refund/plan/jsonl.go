package plan

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// readJSONL reads one JSON object a line with the fields of a plan item:
// batch, item, charge, payment_intent, amount, currency, reason, metadata.
// So a plan can be read back (to re-shard it, say), and a batch it names
// must be the batch being planned. A null or empty string is an absent
// value, as in a CSV cell.
func readJSONL(br *bufio.Reader, c *collector) error {
	lr := lineReader{br: br}
	for {
		text, tooLong, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return readError(c.name, err)
		}
		switch {
		case tooLong:
			c.problem(lr.line, "line longer than %d bytes", maxLine)
			continue
		case len(text) == 0:
			continue
		}
		r, err := c.jsonRow(text)
		if err != nil {
			c.problem(lr.line, "%v", err)
			continue
		}
		r.line = lr.line
		c.add(&r)
	}
}

// maxFields bounds the fields of one JSON line: the plan fields and 40
// metadata values leave room to spare, and the bound keeps the check for
// repeated fields a short scan.
const maxFields = 64

// jsonRow decodes one line, a JSON object. It is checked whole with
// json.Valid, then walked field by field: that is several times faster
// than encoding/json's decoder, and a field given twice is refused rather
// than silently replaced by its last value.
func (c *collector) jsonRow(text []byte) (row, error) {
	var r row
	if !json.Valid(text) {
		return r, jsonSyntax(text)
	}
	w := jsonWalker{b: text}
	if w.next() != '{' {
		return r, errors.New("want a JSON object")
	}
	w.i++
	var seen [maxFields]string
	var unknown []string
	for n := 0; ; n++ {
		if w.next() == '}' {
			break
		}
		if n == maxFields {
			return r, fmt.Errorf("more than %d fields", maxFields)
		}
		name := jsonString(w.value())
		for _, prev := range seen[:n] {
			if prev == name {
				return r, fmt.Errorf("field %s appears twice", show(name))
			}
		}
		seen[n] = name
		w.next() // the colon
		w.i++
		w.next()
		if err := c.jsonField(&r, name, w.value(), &unknown); err != nil {
			return r, err
		}
		if w.next() == ',' {
			w.i++
		}
	}
	if len(unknown) > 0 {
		return r, fmt.Errorf("unknown fields %s (known: batch, item, charge, payment_intent, amount, currency, reason, metadata; --keep-columns keeps others as metadata)", strings.Join(unknown, ", "))
	}
	return r, nil
}

// jsonSyntax describes what is wrong with a line that is not valid JSON.
func jsonSyntax(text []byte) error {
	dec := json.NewDecoder(bytes.NewReader(text))
	var first json.RawMessage
	err := dec.Decode(&first)
	switch {
	case err == nil:
		return errors.New("more than one JSON value on the line")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("not valid JSON: the line ends inside a value")
	}
	return fmt.Errorf("not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonWalker steps through JSON already known to be valid, so it only
// needs to find where each token ends.
type jsonWalker struct {
	b []byte
	i int
}

// next skips white space and returns the byte there, or 0 at the end.
func (w *jsonWalker) next() byte {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\r', '\n':
			w.i++
		default:
			return w.b[w.i]
		}
	}
	return 0
}

// value returns the value starting at w.i, as its JSON text, and moves
// past it.
func (w *jsonWalker) value() []byte {
	start := w.i
	switch w.b[w.i] {
	case '"':
		w.skipString()
	case '{', '[':
		for depth := 0; ; {
			switch w.b[w.i] {
			case '"':
				w.skipString()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			w.i++
			if depth == 0 {
				break
			}
		}
	default: // a number, true, false or null
		for w.i < len(w.b) && !endsLiteral(w.b[w.i]) {
			w.i++
		}
	}
	return w.b[start:w.i]
}

func endsLiteral(b byte) bool {
	switch b {
	case ',', '}', ']', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

// skipString moves past the string starting at w.i.
func (w *jsonWalker) skipString() {
	for w.i++; w.b[w.i] != '"'; w.i++ {
		if w.b[w.i] == '\\' {
			w.i++ // the escaped byte, which may be a quote
		}
	}
	w.i++
}

// jsonString decodes a JSON string's text. Plain UTF-8 without escapes,
// nearly every string, is copied as it is; the rest goes through
// encoding/json, which also turns invalid UTF-8 into U+FFFD.
func jsonString(text []byte) string {
	body := text[1 : len(text)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body)
	}
	var s string
	_ = json.Unmarshal(text, &s) // valid: checked by json.Valid
	return s
}

// jsonField stores one field's value in r.
func (c *collector) jsonField(r *row, name string, value []byte, unknown *[]string) error {
	var dst *string
	repeats := false // the value is likely the same on every row
	switch name {
	case "batch":
		dst, repeats = &r.batch, true
	case "item":
		dst = &r.item
	case "charge":
		dst = &r.charge
	case "payment_intent":
		dst = &r.paymentIntent
	case "currency":
		dst, repeats = &r.currency, true
	case "reason":
		dst, repeats = &r.reason, true
	case "amount":
		switch {
		case value[0] == '"':
			return fmt.Errorf("amount %q: want a JSON number of minor units, not a string", cut(jsonString(value)))
		case string(value) == "null":
		default:
			r.amount = string(value)
		}
		return nil
	case "metadata":
		var m map[string]*string
		if err := json.Unmarshal(value, &m); err != nil {
			return errors.New("metadata: want an object of string values")
		}
		for k, v := range m {
			if v == nil {
				return fmt.Errorf("metadata %s: want a string value, not null", show(k))
			}
			if err := setMetadata(r, k, *v); err != nil {
				return err
			}
		}
		return nil
	default:
		if !c.opts.KeepColumns {
			*unknown = append(*unknown, show(name))
			return nil
		}
		var text string
		switch value[0] {
		case '"':
			text = jsonString(value)
		case '{', '[':
			return fmt.Errorf("field %s: want a string, number or boolean to keep as metadata", show(name))
		case 'n':
			return nil // null: nothing to keep
		default:
			text = string(value) // a number or boolean, kept as written
		}
		if err := checkMetadataKey(name); err != nil {
			return fmt.Errorf("field %s: %v", show(name), err)
		}
		return setMetadata(r, name, text)
	}
	if string(value) == "null" {
		return nil
	}
	if value[0] != '"' {
		return fmt.Errorf("%s: want a string", name)
	}
	if repeats {
		*dst = c.interned(value)
	} else {
		*dst = jsonString(value)
	}
	return nil
}

// maxInterned bounds the strings interned, whatever the input holds.
const maxInterned = 256

// interned decodes a JSON string that recurs from row to row, such as the
// batch or currency, returning the copy made for an earlier row when there
// is one: a million rows then share a few strings instead of allocating a
// million.
func (c *collector) interned(value []byte) string {
	body := value[1 : len(value)-1]
	if s, ok := c.recurring[string(body)]; ok { // looking up does not allocate
		return s
	}
	s := jsonString(value)
	if s == string(body) && len(c.recurring) < maxInterned {
		c.recurring[s] = s
	}
	return s
}

func setMetadata(r *row, key, value string) error {
	if r.metadata == nil {
		r.metadata = make(map[string]string)
	}
	if _, dup := r.metadata[key]; dup {
		return fmt.Errorf("metadata %s given twice", show(key))
	}
	r.metadata[key] = value
	return nil
}
