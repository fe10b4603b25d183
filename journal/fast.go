package journal

import "time"

// decodeFast parses the form MarshalLine writes: keys in Record's order,
// no white space, "v":1, strings of printable ASCII without escapes or
// <, >, &, integers below 10^18 and timestamps. It returns ok false,
// leaving r in any state, for anything else; decodeJSON then decides.
// canonical reports that line is byte for byte what MarshalLine writes for
// r, so it can be copied instead of encoded again. Strings in r are
// substrings of str, which holds the same bytes as line: the caller
// chooses whether they share memory with line.
func decodeFast(line []byte, str string, r *Record) (ok, canonical bool) {
	*r = Record{}
	if len(line) < 2 || line[0] != '{' || line[len(line)-1] != '}' {
		return false, false
	}
	canonical = true
	p := 1
	next := 0 // index in recordFields the next key must have or follow
	for {
		if line[p] != '"' {
			return false, false
		}
		i := next
		for ; i < len(recordFields); i++ {
			f := recordFields[i]
			if len(line) > p+len(f)+2 && line[p+1+len(f)] == '"' && line[p+2+len(f)] == ':' && str[p+1:p+1+len(f)] == f {
				break
			}
		}
		if i == len(recordFields) || (i == 0 && p != 1) {
			return false, false
		}
		if i > next && next < 5 {
			canonical = false // v, type, ts, batch and item are always written
		}
		next = i + 1
		p += len(recordFields[i]) + 3
		var (
			s    string
			n    int64
			good bool
		)
		switch i {
		case 0, 7, 9, 15: // v, attempt, amount, http_status
			n, p, good = fastInt(line, p)
			if good && n == 0 {
				canonical = false // an omitempty zero, or -0 (and "v":0 is refused below)
			}
		case 18: // final
			switch {
			case len(line)-p > 4 && string(line[p:p+4]) == "true":
				r.Final, p, good = true, p+4, true
			case len(line)-p > 5 && string(line[p:p+5]) == "false":
				p, good, canonical = p+5, true, false
			}
		default:
			s, p, good = fastString(line, str, p)
			if good && s == "" && i > 4 {
				canonical = false // omitempty empty string
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
		case 1:
			r.Type = Type(s)
		case 2:
			var exact bool
			if r.Time, good, exact = parseTime(s); !good {
				return false, false
			}
			canonical = canonical && exact
		case 3:
			r.Batch = s
		case 4:
			r.Item = s
		case 5:
			r.Charge = s
		case 6:
			r.PaymentIntent = s
		case 7:
			r.Attempt = int(n)
		case 8:
			r.Key = s
		case 9:
			r.Amount = n
		case 10:
			r.Currency = s
		case 11:
			r.Reason = s
		case 12:
			r.Refund = s
		case 13:
			r.Status = s
		case 14:
			r.Source = s
		case 15:
			r.HTTPStatus = int(n)
		case 16:
			r.Code = s
		case 17:
			r.Message = s
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

// fastString reads the JSON string starting at line[p] when it has no
// escapes and only printable ASCII; p is then past its closing quote.
func fastString(line []byte, str string, p int) (s string, end int, ok bool) {
	if p >= len(line) || line[p] != '"' {
		return "", p, false
	}
	start := p + 1
	for i := start; i < len(line); i++ {
		c := line[i]
		if c == '"' {
			return str[start:i], i + 1, true
		}
		if c < 0x20 || c >= 0x7f || c == '\\' || c == '<' || c == '>' || c == '&' {
			return "", p, false
		}
	}
	return "", p, false
}

// fastInt reads a JSON integer of at most 18 digits, so it cannot overflow.
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

// parseTime reads a timestamp as time.Time's UnmarshalJSON does. The form
// MarshalLine writes for UTC, 2006-01-02T15:04:05.999999999Z, is parsed
// here; anything else is left to the time package. canonical reports that
// MarshalLine writes the result as s (no trailing zeros in the fraction).
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

// slowTime parses what parseTime does not; the result is never taken as
// canonical, so the merge encodes it again rather than reason about zones.
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
