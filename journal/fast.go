package journal

import "time"

// decodeFast parses the form MarshalLine writes: keys in Record's order,
// no white space, "v":1, strings of printable ASCII without escapes,
// integers below 10^18 and a UTC timestamp. It returns false, leaving r in
// any state, for anything else; decodeJSON then decides. Strings in r are
// substrings of str, which holds the same bytes as line: the caller chooses
// whether they share memory with line.
func decodeFast(line []byte, str string, r *Record) bool {
	*r = Record{}
	if len(line) < 2 || line[0] != '{' || line[len(line)-1] != '}' {
		return false
	}
	p := 1
	next := 0 // index in recordFields the next key must have or follow
	for {
		// Key.
		if line[p] != '"' {
			return false
		}
		i := next
		for ; i < len(recordFields); i++ {
			f := recordFields[i]
			if len(line) > p+len(f)+2 && line[p+1+len(f)] == '"' && line[p+2+len(f)] == ':' && str[p+1:p+1+len(f)] == f {
				break
			}
		}
		if i == len(recordFields) {
			return false
		}
		if i == 0 {
			if p != 1 { // "v" must come first
				return false
			}
		}
		next = i + 1
		p += len(recordFields[i]) + 3
		// Value.
		var ok bool
		switch i {
		case 0: // v
			if line[p] != '1' {
				return false
			}
			r.V = 1
			p++
			ok = true
		case 1:
			var s string
			s, p, ok = fastString(line, str, p)
			r.Type = Type(s)
		case 2:
			var s string
			s, p, ok = fastString(line, str, p)
			if ok {
				r.Time, ok = parseTime(s)
			}
		case 3:
			r.Batch, p, ok = fastString(line, str, p)
		case 4:
			r.Item, p, ok = fastString(line, str, p)
		case 5:
			r.Charge, p, ok = fastString(line, str, p)
		case 6:
			r.PaymentIntent, p, ok = fastString(line, str, p)
		case 7:
			var n int64
			n, p, ok = fastInt(line, p)
			r.Attempt = int(n)
		case 8:
			r.Key, p, ok = fastString(line, str, p)
		case 9:
			r.Amount, p, ok = fastInt(line, p)
		case 10:
			r.Currency, p, ok = fastString(line, str, p)
		case 11:
			r.Reason, p, ok = fastString(line, str, p)
		case 12:
			r.Refund, p, ok = fastString(line, str, p)
		case 13:
			r.Status, p, ok = fastString(line, str, p)
		case 14:
			r.Source, p, ok = fastString(line, str, p)
		case 15:
			var n int64
			n, p, ok = fastInt(line, p)
			r.HTTPStatus = int(n)
		case 16:
			r.Code, p, ok = fastString(line, str, p)
		case 17:
			r.Message, p, ok = fastString(line, str, p)
		case 18:
			switch {
			case len(line)-p > 4 && string(line[p:p+4]) == "true":
				r.Final, p, ok = true, p+4, true
			case len(line)-p > 5 && string(line[p:p+5]) == "false":
				p, ok = p+5, true
			}
		}
		if !ok || p >= len(line) {
			return false
		}
		switch line[p] {
		case '}':
			return p == len(line)-1 && r.V == 1
		case ',':
			p++
		default:
			return false
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
		if c < 0x20 || c >= 0x7f || c == '\\' {
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
// here; anything else is left to the time package.
func parseTime(s string) (time.Time, bool) {
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
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

func slowTime(s string) (time.Time, bool) {
	var t time.Time
	err := t.UnmarshalJSON([]byte(`"` + s + `"`))
	return t, err == nil
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
