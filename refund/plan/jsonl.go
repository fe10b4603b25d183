package plan

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
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
			return fmt.Errorf("read %s: %w", c.name, err)
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

// jsonRow decodes one line. Fields are read one by one so a field given
// twice is refused, not silently replaced by its last value.
func (c *collector) jsonRow(text []byte) (row, error) {
	var r row
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return r, errors.New("want a JSON object")
	}
	seen := map[string]bool{}
	var unknown []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return r, jsonSyntax(err)
		}
		name := tok.(string) // object keys are always strings
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return r, jsonSyntax(err)
		}
		if seen[name] {
			return r, fmt.Errorf("field %s appears twice", show(name))
		}
		seen[name] = true
		if err := c.jsonField(&r, name, value, &unknown); err != nil {
			return r, err
		}
	}
	if _, err := dec.Token(); err != nil {
		return r, jsonSyntax(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return r, errors.New("more than one JSON value on the line")
	}
	if len(unknown) > 0 {
		return r, fmt.Errorf("unknown fields %s (known: batch, item, charge, payment_intent, amount, currency, reason, metadata; --keep-columns keeps others as metadata)", strings.Join(unknown, ", "))
	}
	return r, nil
}

func jsonSyntax(err error) error {
	if err == io.EOF {
		return errors.New("not valid JSON: the line ends inside the object")
	}
	return fmt.Errorf("not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonField stores one field's value in r.
func (c *collector) jsonField(r *row, name string, value json.RawMessage, unknown *[]string) error {
	var dst *string
	switch name {
	case "batch":
		dst = &r.batch
	case "item":
		dst = &r.item
	case "charge":
		dst = &r.charge
	case "payment_intent":
		dst = &r.paymentIntent
	case "currency":
		dst = &r.currency
	case "reason":
		dst = &r.reason
	case "amount":
		switch {
		case value[0] == '"':
			var text string
			_ = json.Unmarshal(value, &text) // the decoder has checked it
			return fmt.Errorf("amount %q: want a JSON number of minor units, not a string", cut(text))
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
			if err := json.Unmarshal(value, &text); err != nil {
				return jsonSyntax(err)
			}
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
	return json.Unmarshal(value, dst)
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
