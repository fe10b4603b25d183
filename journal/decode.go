package journal

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"strings"
	"time"
	"unsafe"
)

// syntaxError is a line that is not a JSON object: torn if last, else corrupt.
type syntaxError struct{ msg string }

func (e *syntaxError) Error() string { return e.msg }

// decodeLine parses a line strictly (unknown or repeated fields, wrong types,
// Validate): canonical lines on a fast path, the rest through encoding/json,
// to the same Record. str holds line's bytes; the fast path takes strings
// from it. canonical: line is byte for byte what MarshalLine writes.
func decodeLine(line []byte, str string, r *Record) (canonical bool, err error) {
	ok, canonical := decodeFast(line, str, r)
	if !ok {
		return false, decodeJSON(line, r)
	}
	return canonical, r.Validate()
}

// DecodeLine decodes one complete line as strictly as a Scanner: the same
// Record, or an error where a Scanner refuses it. str holds the same bytes
// as line, and r's strings may share it.
func DecodeLine(line []byte, str string, r *Record) error {
	*r = Record{}
	_, err := decodeLine(line, str, r)
	return err
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
		return &syntaxError{"not JSON: " + jsonMessage(json.Unmarshal(line, new(any))) + snippet(line)}
	}
	if t := bytes.TrimLeft(line, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return &syntaxError{"not a JSON object" + snippet(line)}
	}
	// Valid JSON: the tokens read without error.
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.Token() // '{'
	var (
		seen    uint32
		version json.RawMessage
		problem string
	)
	for dec.More() {
		tok, _ := dec.Token()
		key, _ := tok.(string)
		var raw json.RawMessage
		dec.Decode(&raw)
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

// decodeFast parses the form MarshalLine writes (keys in order, no white
// space, plain ASCII strings, integers below 10^18); ok false for anything
// else, left to decodeJSON. canonical: line is byte for byte what
// MarshalLine writes, so it may be copied. r's strings are str's.
func decodeFast(line []byte, str string, r *Record) (ok, canonical bool) {
	*r = Record{}
	if len(line) < 2 || len(line) > math.MaxInt32 || line[0] != '{' || line[len(line)-1] != '}' {
		return false, false
	}
	var quotes [maxQuotes]int32
	nq, plain := scanLine(line, &quotes)
	if !plain {
		return false, false
	}
	canonical = true
	p, qi := 1, 0 // the next byte, and the next quote in quotes
	next := 0     // index in recordFields the next key must have or follow
	for {
		// The key: this quote and the next; no quote in between is escaped.
		if qi+1 >= nq || int(quotes[qi]) != p {
			return false, false
		}
		kend := int(quotes[qi+1])
		qi += 2
		if kend+2 >= len(line) || line[kend+1] != ':' {
			return false, false
		}
		i := next // keys come in order: the search starts at the next one
		for i < len(recordFields) && recordFields[i] != str[p+1:kend] {
			i++
		}
		if i == len(recordFields) { // unknown, out of order, repeated
			return false, false
		}
		if i > next && next < 5 {
			canonical = false // v, type, ts, batch and item are always written
		}
		next = i + 1
		p = kend + 2
		var (
			s    string
			n    int64
			good bool
		)
		switch i {
		case 0, 9, 11, 17: // v, attempt, amount, http_status
			n, p, good = fastInt(line, p)
			if good && n == 0 {
				canonical = false // an omitempty zero, or -0 (and "v":0 is refused below)
			}
		case 20: // final
			switch {
			case len(line)-p > 4 && string(line[p:p+4]) == "true":
				r.Final, p, good = true, p+4, true
			case len(line)-p > 5 && string(line[p:p+5]) == "false":
				p, good, canonical = p+5, true, false
			}
		default: // a string, between this quote and the next
			if qi+1 < nq && int(quotes[qi]) == p {
				end := int(quotes[qi+1])
				s, p, good = str[p+1:end], end+1, true
				qi += 2
				if s == "" && i > 4 {
					canonical = false // omitempty empty string
				}
			}
		}
		if !good || p >= len(line) {
			return false, false
		}
		switch i {
		case 0:
			if n != Version {
				return false, false // decodeJSON reports the version
			}
			r.V = int(n)
		case 2:
			var exact bool
			if r.Time, good, exact = parseTime(s); !good {
				return false, false
			}
			canonical = canonical && exact
		case 9:
			r.Attempt = int(n)
		case 11:
			r.Amount = n
		case 17:
			r.HTTPStatus = int(n)
		case 20:
		default:
			*(*string)(unsafe.Add(unsafe.Pointer(r), stringFields[i])) = s
		}
		switch line[p] {
		case '}':
			if p != len(line)-1 || r.V != Version {
				return false, false
			}
			return true, canonical && next >= 5
		case ',':
			p++
		default:
			return false, false
		}
	}
}

var stringFields = func() (at [len(recordFields)]uintptr) {
	t := reflect.TypeFor[Record]()
	for i := range t.NumField() {
		if f := t.Field(i); f.Type.Kind() == reflect.String {
			at[fieldIndex(strings.Split(f.Tag.Get("json"), ",")[0])] = f.Offset
		}
	}
	return at
}()

// maxQuotes bounds the quotes of a record: 21 keys and 16 string values.
const maxQuotes = 2 * (21 + 16)

// scanLine lists the quotes of a line of printable ASCII without \ < > &
// (what encoding/json escapes), so every quote delimits a string.
func scanLine(line []byte, quotes *[maxQuotes]int32) (n int, ok bool) {
	const ones, lows = 0x0101010101010101, 0x7f7f7f7f7f7f7f7f
	i := 0
	for ; i+8 <= len(line); i += 8 {
		x := binary.LittleEndian.Uint64(line[i:])
		if special8(x) {
			return 0, false
		}
		v := x ^ (ones * '"')
		for m := ^(((v & lows) + lows) | v | lows); m != 0; m &= m - 1 {
			if n == maxQuotes {
				return 0, false
			}
			quotes[n] = int32(i + bits.TrailingZeros64(m)/8)
			n++
		}
	}
	for ; i < len(line); i++ {
		switch c := line[i]; {
		case !plainByte[c]:
			return 0, false
		case c == '"':
			if n == maxQuotes {
				return 0, false
			}
			quotes[n] = int32(i)
			n++
		}
	}
	return n, true
}

var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = true
	}
	for _, c := range `\<>&` {
		t[c] = false
	}
	return t
}()

// special8 reports whether a byte of x is not plain (Bit Twiddling Hacks).
func special8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below := (x - ones*0x20) &^ x
	above := (x + ones*(0x7f-0x7e)) | x
	bs, ltgt, amp := x^(ones*'\\'), (x|ones*0x02)^(ones*'>'), x^(ones*'&')
	return (below|above|(bs-ones)&^bs|(ltgt-ones)&^ltgt|(amp-ones)&^amp)&highs != 0
}

func fastInt(line []byte, p int) (n int64, end int, ok bool) {
	neg := p < len(line) && line[p] == '-'
	if neg {
		p++
	}
	start := p
	for p < len(line) && line[p] >= '0' && line[p] <= '9' {
		n = n*10 + int64(line[p]-'0')
		p++
	}
	digits := p - start
	if digits == 0 || digits > 18 || (digits > 1 && line[start] == '0') {
		return 0, p, false
	}
	if neg {
		n = -n
	}
	return n, p, true
}

// parseTime reads a timestamp as time.Time's UnmarshalJSON does, the UTC
// form MarshalLine writes itself; canonical: MarshalLine writes it as s.
func parseTime(s string) (t time.Time, ok, canonical bool) {
	if len(s) < len("2006-01-02T15:04:05Z") || len(s) > len("2006-01-02T15:04:05.999999999Z") ||
		s[len(s)-1] != 'Z' || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return slowTime(s)
	}
	year, ok1 := digits(s[0:4])
	month, ok2 := digits(s[5:7])
	day, ok3 := digits(s[8:10])
	hour, ok4 := digits(s[11:13])
	minute, ok5 := digits(s[14:16])
	sec, ok6 := digits(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 ||
		day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return slowTime(s)
	}
	nsec := 0
	if frac := s[19 : len(s)-1]; frac != "" {
		if len(frac) < 2 || frac[0] != '.' {
			return slowTime(s)
		}
		n, ok := digits(frac[1:])
		if !ok {
			return slowTime(s)
		}
		for i := len(frac) - 1; i < 9; i++ {
			n *= 10
		}
		nsec = n
		canonical = frac[len(frac)-1] != '0'
	} else {
		canonical = true
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true, canonical
}

// slowTime's result is never canonical: the merge encodes it again.
func slowTime(s string) (t time.Time, ok, canonical bool) {
	err := t.UnmarshalJSON([]byte(`"` + s + `"`))
	return t, err == nil, false
}

func digits(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
