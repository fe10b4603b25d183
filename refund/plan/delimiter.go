package plan

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"strings"
)

// Delimiters plan reads CSV with: Excel writes semicolons where the decimal
// separator is a comma (most of Europe), and tabs for "Text (Tab
// delimited)".
const (
	Comma     = ','
	Semicolon = ';'
	Tab       = '\t'
)

// delimiters are the ones detected, the default first.
var delimiters = []rune{Comma, Semicolon, Tab}

// ParseDelimiter reads a --delimiter value: , ; or tab (also comma,
// semicolon, \t), or auto (0: detect it from the header row).
func ParseDelimiter(s string) (rune, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return 0, nil
	case ",", "comma":
		return Comma, nil
	case ";", "semicolon":
		return Semicolon, nil
	case "\t", `\t`, "tab":
		return Tab, nil
	}
	return 0, fmt.Errorf("delimiter %q: want , ; or tab (or auto, to tell it from the header row)", s)
}

// DelimiterName names a delimiter for people: ",", ";", "tab".
func DelimiterName(d rune) string {
	if d == Tab {
		return "tab"
	}
	return string(d)
}

// delimiterError is a header row that more than one delimiter reads as
// well: which one it is must be said.
type delimiterError struct{ candidates []rune }

func (e *delimiterError) Error() string {
	names, flags := make([]string, len(e.candidates)), make([]string, len(e.candidates))
	for i, d := range e.candidates {
		names[i], flags[i] = delimiterWords(d), "--delimiter "+delimiterFlag(d)
	}
	return fmt.Sprintf("header row: %s separate names in it and no one of them reads as the columns better: say which delimits them (%s)",
		strings.Join(names, " and "), strings.Join(flags, " or "))
}

// detectDelimiter tells the delimiter of a CSV input from its header row,
// the first line that is not blank, as far as the reader's buffer holds
// it, and the header's line number. Nothing is consumed. A header with none of the delimiters outside
// quotes is one column: comma. With one, it is that one. With more than
// one, the one that splits it into the most known column names; a tie is
// a *delimiterError. The rows are never looked at: a decimal comma in an
// amount (12,50 in a semicolon-separated file) must not pass for a
// delimiter.
func detectDelimiter(br *bufio.Reader) (d rune, header int, err error) {
	head, err := br.Peek(br.Size())
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return 0, 0, err
	}
	var line []byte
	for len(head) > 0 && len(line) == 0 {
		header++
		line = head
		if i := bytes.IndexByte(head, '\n'); i >= 0 {
			line, head = head[:i], head[i+1:]
		} else {
			head = nil
		}
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			line = nil
		}
	}
	var found []rune
	for _, d := range delimiters {
		if unquotedIndex(line, byte(d)) {
			found = append(found, d)
		}
	}
	switch len(found) {
	case 0:
		return Comma, header, nil
	case 1:
		return found[0], header, nil
	}
	best, bestScore, tie := rune(0), -1, false
	for _, d := range found {
		switch s := knownNames(line, d); {
		case s > bestScore:
			best, bestScore, tie = d, s, false
		case s == bestScore:
			tie = true
		}
	}
	if tie {
		return 0, header, &delimiterError{candidates: found}
	}
	return best, header, nil
}

// unquotedIndex reports whether b holds c outside double quotes.
func unquotedIndex(b []byte, c byte) bool {
	quoted := false
	for _, x := range b {
		switch {
		case x == '"':
			quoted = !quoted
		case x == c && !quoted:
			return true
		}
	}
	return false
}

// knownNames counts the cells of line, split by d, that name a column.
func knownNames(line []byte, d rune) int {
	cr := csv.NewReader(bytes.NewReader(line))
	cr.Comma = d
	cr.LazyQuotes = true
	rec, err := cr.Read()
	if err != nil {
		return 0
	}
	n := 0
	for _, f := range rec {
		if isColumn(strings.TrimSpace(f)) {
			n++
		}
	}
	return n
}

// delimiterWords names a delimiter in a sentence: "commas", "semicolons",
// "tabs".
func delimiterWords(d rune) string {
	switch d {
	case Semicolon:
		return "semicolons"
	case Tab:
		return "tabs"
	}
	return "commas"
}

// delimiterFlag is d as --delimiter takes it on a shell's command line.
func delimiterFlag(d rune) string {
	switch d {
	case Semicolon:
		return "';'"
	case Tab:
		return "tab"
	}
	return ","
}
