package refund

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// kind names a JSON value by its first byte, for messages.
func kind(c byte) string {
	if c == '[' {
		return "an array"
	}
	return "an object"
}

// jsonNumber reports whether tok, a token (token), is a JSON number.
func jsonNumber(tok []byte) bool {
	return (tok[0] == '-' || tok[0] >= '0' && tok[0] <= '9') && json.Valid(tok)
}

// scanner steps through one line of JSON for ItemDecoder (objects of
// strings, numbers and literals), with errors that say column and field.
type scanner struct {
	b     []byte
	i     int
	field string // whose value is being read: syntax errors name it
	buf   []byte // strings with escapes, decoded
}

func (s *scanner) end() bool { return s.i >= len(s.b) }

// ws skips JSON white space.
func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// syntax is JSON that is not, at s.i.
func (s *scanner) syntax(format string, args ...any) error {
	if s.end() {
		return &InputError{Err: errors.New("not valid JSON: the line ends inside the object")}
	}
	return fieldError(s.field, "not valid JSON: column %d: "+format, append([]any{s.i + 1}, args...)...)
}

// unexpected shows the byte at s.i in a message.
func (s *scanner) unexpected() string {
	if c := s.b[s.i]; c >= ' ' && c < 0x7f {
		return fmt.Sprintf("'%c'", c)
	}
	return fmt.Sprintf("byte %#02x", s.b[s.i])
}

// next moves past the comma after a value, or the closing brace (done).
func (s *scanner) next() (done bool, err error) {
	s.ws()
	if s.end() {
		return false, s.syntax("")
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return false, nil
	case '}':
		s.i++
		return true, nil
	}
	return false, s.syntax("unexpected %s after the value", s.unexpected())
}

// members reads an object from its '{' to its '}', each member's value
// by each; outer is the field a syntax error in a name names.
func (s *scanner) members(outer string, each func(key string) error) error {
	s.i++
	s.ws()
	if !s.end() && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.ws()
		s.field = outer
		key, err := s.name()
		if err != nil {
			return err
		}
		if err := each(key); err != nil {
			return err
		}
		if done, err := s.next(); err != nil || done {
			return err
		}
	}
}

// name reads a field name or key and the colon after it.
func (s *scanner) name() (string, error) {
	if err := s.expect('"', "a field name"); err != nil {
		return "", err
	}
	body, _, err := s.str("")
	if err != nil {
		return "", err
	}
	key := known(fieldNames[:], body)
	s.ws()
	if err := s.expect(':', "':'"); err != nil {
		return "", err
	}
	s.i++
	s.ws()
	if s.end() {
		return "", s.syntax("")
	}
	return key, nil
}

// expect checks that the byte at s.i is c, which what names.
func (s *scanner) expect(c byte, what string) error {
	switch {
	case s.end():
		return s.syntax("")
	case s.b[s.i] != c:
		return s.syntax("unexpected %s, want %s", s.unexpected(), what)
	}
	return nil
}

// token reads a number or literal: the bytes up to the next delimiter.
func (s *scanner) token() ([]byte, error) {
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n', ',', ':', '"', '{', '}', '[', ']':
			if s.i == start {
				return nil, s.syntax("unexpected %s, want a value", s.unexpected())
			}
			return s.b[start:s.i], nil
		}
		s.i++
	}
	if s.i == start {
		return nil, s.syntax("")
	}
	return s.b[start:s.i], nil
}

// scalar reads a number or literal (tok nil: null); an object or array is
// an error saying want.
func (s *scanner) scalar(want string) (tok []byte, err error) {
	if c := s.b[s.i]; c == '{' || c == '[' {
		return nil, fieldError(s.field, "%s: %s", kind(c), want)
	}
	if tok, err = s.token(); err == nil && string(tok) == "null" {
		return nil, nil
	}
	return tok, err
}

// other reads a value where a string or object was wanted: null, or an
// error saying want.
func (s *scanner) other(want string) (null bool, err error) {
	tok, err := s.scalar(want)
	if err != nil || tok == nil {
		return err == nil, err
	}
	return false, fieldError(s.field, "%s: %s", Show(string(tok)), want)
}

// str reads a string, or null when want says what else is allowed (""
// when the value is known to be a string). The text is valid until the
// next call.
func (s *scanner) str(want string) (body []byte, null bool, err error) {
	if s.b[s.i] != '"' {
		null, err := s.other(want)
		return nil, null, err
	}
	start := s.i + 1
	for i := start; i < len(s.b); i++ {
		switch c := s.b[i]; {
		case c == '"':
			s.i = i + 1
			return s.text(s.b[start:i])
		case c == '\\':
			return s.unescape(start, i)
		case c < 0x20:
			s.i = i
			return nil, false, s.syntax("control character in a string")
		}
	}
	s.i = len(s.b)
	return nil, false, s.syntax("")
}

// text checks a decoded string is UTF-8: refused, never replaced.
func (s *scanner) text(body []byte) ([]byte, bool, error) {
	if !utf8.Valid(body) {
		return nil, false, fieldError(s.field, "not valid UTF-8")
	}
	return body, false, nil
}

// unescape decodes a string from start, whose first escape is at i.
func (s *scanner) unescape(start, i int) ([]byte, bool, error) {
	buf := append(s.buf[:0], s.b[start:i]...)
	defer func() { s.buf = buf[:0] }()
	for i < len(s.b) {
		c := s.b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return s.text(buf)
		case c < 0x20:
			s.i = i
			return nil, false, s.syntax("control character in a string")
		case c != '\\':
			buf = append(buf, c)
			i++
			continue
		}
		if i+1 >= len(s.b) {
			break
		}
		e := s.b[i+1]
		if k := strings.IndexByte(`"\/bfnrt`, e); k >= 0 {
			buf = append(buf, "\"\\/\b\f\n\r\t"[k])
			i += 2
			continue
		}
		if e != 'u' {
			s.i = i
			if e >= ' ' && e < 0x7f {
				return nil, false, s.syntax(`unknown escape \%c`, e)
			}
			return nil, false, s.syntax("unknown escape")
		}
		r, ok := hex4(s.b, i+2)
		if !ok {
			s.i = i
			return nil, false, s.syntax(`\u wants 4 hex digits`)
		}
		if utf16.IsSurrogate(r) {
			r2, ok := rune(0), false
			if i+7 < len(s.b) && s.b[i+6] == '\\' && s.b[i+7] == 'u' {
				r2, ok = hex4(s.b, i+8)
			}
			pair := utf16.DecodeRune(r, r2)
			if !ok || pair == utf8.RuneError {
				return nil, false, fieldError(s.field, `\u%04x is half of a UTF-16 surrogate pair`, r)
			}
			r = pair
			i += 6
		}
		buf = utf8.AppendRune(buf, r)
		i += 6
	}
	s.i = len(s.b)
	return nil, false, s.syntax("")
}

// hex4 reads the 4 hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return rune(n), err == nil
}
