package refund

import (
	"errors"
	"fmt"
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

// jsonNumber reports whether tok is a JSON number:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func jsonNumber(tok []byte) bool {
	i := 0
	someDigits := func() bool {
		start := i
		for i < len(tok) && tok[i] >= '0' && tok[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(tok) && tok[i] == '-' {
		i++
	}
	switch {
	case i < len(tok) && tok[i] == '0':
		i++
	case !someDigits():
		return false
	}
	if i < len(tok) && tok[i] == '.' {
		i++
		if !someDigits() {
			return false
		}
	}
	if i < len(tok) && (tok[i] == 'e' || tok[i] == 'E') {
		i++
		if i < len(tok) && (tok[i] == '+' || tok[i] == '-') {
			i++
		}
		if !someDigits() {
			return false
		}
	}
	return i == len(tok)
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

// name reads a field name or key and the colon after it.
func (s *scanner) name() (string, error) {
	if s.end() || s.b[s.i] != '"' {
		if s.end() {
			return "", s.syntax("")
		}
		return "", s.syntax("unexpected %s, want a field name", s.unexpected())
	}
	body, _, err := s.str("")
	if err != nil {
		return "", err
	}
	key := known(fieldNames[:], body)
	s.ws()
	if s.end() || s.b[s.i] != ':' {
		if s.end() {
			return "", s.syntax("")
		}
		return "", s.syntax("unexpected %s, want ':'", s.unexpected())
	}
	s.i++
	s.ws()
	if s.end() {
		return "", s.syntax("")
	}
	return key, nil
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

// str reads a string, or null when want says what else is allowed (""
// when the value is known to be a string). The text is valid until the
// next call.
func (s *scanner) str(want string) (body []byte, null bool, err error) {
	if c := s.b[s.i]; c != '"' {
		if c == '{' || c == '[' {
			return nil, false, fieldError(s.field, "%s: %s", kind(c), want)
		}
		tok, err := s.token()
		switch {
		case err != nil:
			return nil, false, err
		case string(tok) == "null":
			return nil, true, nil
		}
		return nil, false, fieldError(s.field, "%s: %s", Show(string(tok)), want)
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
		switch e := s.b[i+1]; e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
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
			continue
		default:
			s.i = i
			if e >= ' ' && e < 0x7f {
				return nil, false, s.syntax(`unknown escape \%c`, e)
			}
			return nil, false, s.syntax("unknown escape")
		}
		i += 2
	}
	s.i = len(s.b)
	return nil, false, s.syntax("")
}

// hex4 reads the 4 hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
