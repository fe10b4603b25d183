package refund_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/refundkit/refundkit/refund"
)

// TestLineReader: lines numbered as a text editor numbers them, blank ones
// skipped, line ends dropped, a line too long reported with its number and
// read past, lines longer than the read buffer whole.
func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 200<<10) // several buffers, under the limit
	in := "a\r\n\n \t\r\nb\n" + strings.Repeat("y", refund.MaxLineBytes) + "\n" + long + "\n\f\nlast"
	type got struct {
		line int
		text string
		err  string
	}
	want := []got{{1, "a", ""}, {4, "b", ""}, {5, "", "in:5: line longer than 1048576 bytes"}, {6, long, ""}, {7, "\f", ""}, {8, "last", ""}}
	for _, r := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in))} {
		lr := refund.NewLineReader(r, "in")
		for i := 0; ; i++ {
			text, line, err := lr.Next()
			if err == io.EOF {
				if i != len(want) {
					t.Fatalf("%d lines, want %d", i, len(want))
				}
				break
			}
			g := got{line: line, text: string(text)}
			if err != nil {
				g.err = err.Error()
			}
			if i >= len(want) || g != want[i] {
				t.Fatalf("line %d: %d %.20q %q", i, g.line, g.text, g.err)
			}
		}
	}
}

// TestItemReaderGoesOnPastABadLine: each bad line is an *InputError with
// its own number, and the lines after it are read.
func TestItemReaderGoesOnPastABadLine(t *testing.T) {
	in := `{"batch":"b","item":"i1","charge":"ch_1"}` + "\n" + `{"batch":"b","item":"i2","charge":"ch_2","amount":0}` + "\n\n" +
		`{"batch":"b","item":"i3","charge":"ch_3","reason":null}` + "\n"
	items := refund.NewItemReader(strings.NewReader(in), "p.jsonl")
	var got []string
	for {
		it, line, err := items.Next()
		if err == io.EOF {
			break
		}
		var ie *refund.InputError
		switch {
		case errors.As(err, &ie):
			got = append(got, ie.Error())
		case err != nil:
			t.Fatal(err)
		default:
			got = append(got, it.Item+"@"+string(rune('0'+line)))
		}
	}
	want := "i1@1|p.jsonl:2: amount: 0: want a positive whole number of minor units|i3@4"
	if strings.Join(got, "|") != want {
		t.Errorf("%s\nwant %s", strings.Join(got, "|"), want)
	}
}
