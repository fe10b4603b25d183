package plan

import (
	"errors"
	"strings"
	"testing"
)

// TestDelimiter: semicolon- and tab-separated exports (European Excel,
// tab-delimited text) are read as the comma-separated file is, the
// delimiter told from the header row alone or given; an amount written
// with a decimal comma or a thousands separator is an error at its line,
// never 1250 or 12.
func TestDelimiter(t *testing.T) {
	const want = `{"batch":"b1","item":"ch_1","charge":"ch_1","amount":1250,"currency":"eur"}
{"batch":"b1","item":"ch_2","charge":"ch_2","currency":"eur","metadata":{"note":"a;b,c"}}
`
	for _, c := range []struct {
		name  string
		delim rune
		in    string
		want  string // the plan, or the problems one a line
		read  rune   // Plan.Delimiter
	}{
		{"comma", 0, "charge,amount,currency,metadata.note\nch_1,1250,EUR,\nch_2,,eur,\"a;b,c\"\n", want, Comma},
		{"semicolon", 0, "charge;amount;currency;metadata.note\nch_1;1250;EUR;\nch_2;;eur;\"a;b,c\"\n", want, Semicolon},
		{"tab, an empty field kept", 0, "charge\tamount\tcurrency\tmetadata.note\nch_1\t1250\tEUR\t\nch_2\t\teur\ta;b,c\n", want, Tab},
		{"blank lines and a BOM before the header", 0, "\xef\xbb\xbf\n\ncharge;amount;currency;metadata.note\nch_1;1250;EUR;\nch_2;;eur;a;b,c\n",
			"p:5: 5 fields, the header has 4", Semicolon},
		{"a delimiter in a quoted header name is not one", 0, "charge;\"metadata.a,b\";amount;currency\nch_1;;1250;eur\n",
			`{"batch":"b1","item":"ch_1","charge":"ch_1","amount":1250,"currency":"eur"}` + "\n", Semicolon},
		{"one column", 0, "charge\nch_1\n", `{"batch":"b1","item":"ch_1","charge":"ch_1"}` + "\n", Comma},
		{"the header's known names decide", 0, "charge;amount;metadata.note, more\nch_1;5;x, y\n",
			`{"batch":"b1","item":"ch_1","charge":"ch_1","amount":5,"metadata":{"note, more":"x, y"}}` + "\n", Semicolon},
		{"given", Semicolon, "charge;metadata.note\nch_1;a,b\n", `{"batch":"b1","item":"ch_1","charge":"ch_1","metadata":{"note":"a,b"}}` + "\n", Semicolon},
		{"given and wrong", Comma, "charge;amount\nch_1;5\n",
			"p:1: unknown columns charge;amount (known: charge, payment_intent, capture, psp_reference, amount, currency, reason, item, batch, metadata.<key>; --keep-columns keeps others as metadata); the header is read with commas between columns: for semicolons, give --delimiter ';'\n" +
				"p:1: no charge, payment_intent, capture or psp_reference column", 0},
		{"ambiguous", 0, "charge,amount;currency\nch_1,1;eur\n",
			"p:1: header row: commas and semicolons separate names in it and no one of them reads as the columns better: say which delimits them (--delimiter , or --delimiter ';')", 0},
		{"a decimal comma", 0, "charge;amount;currency\nch_1;12,50;eur\nch_2;1250;eur\nch_3;1.250;eur\nch_4;1 250;eur\nch_5;12,;eur\n",
			"p:2: amount: 12,50: want a positive whole number of minor units, with no decimal or thousands separator (12.50 EUR is 1250)\n" +
				"p:4: amount: 1.250: want a positive whole number of minor units, with no decimal or thousands separator (12.50 EUR is 1250)\n" +
				"p:5: amount: \"1 250\": want a positive whole number of minor units, with no decimal or thousands separator (12.50 EUR is 1250)\n" +
				"p:6: amount: 12,: want a positive whole number of minor units", 0},
		{"a decimal comma unquoted in a comma-separated file", 0, "charge,amount,currency\nch_1,12,50,eur\nch_2,\"12,50\",eur\n",
			"p:2: 4 fields, the header has 3: is 12,50 an amount with a decimal comma? amounts are whole minor units, with no separator (12.50 EUR is 1250)\n" +
				"p:3: amount: 12,50: want a positive whole number of minor units, with no decimal or thousands separator (12.50 EUR is 1250)", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Read(strings.NewReader(c.in), "p", Options{Batch: "b1", Delimiter: c.delim})
			if c.read != 0 && strings.HasPrefix(c.want, "{") {
				if err != nil {
					t.Fatal(err)
				}
				if got := encode(t, p.Items()); got != c.want {
					t.Errorf("plan\n%s\nwant\n%s", got, c.want)
				}
				if p.Delimiter() != c.read {
					t.Errorf("Delimiter %q, want %q", p.Delimiter(), c.read)
				}
				if sh := p.Shard(1, 1); sh.Delimiter() != c.read {
					t.Errorf("a shard's Delimiter %q, want %q", sh.Delimiter(), c.read)
				}
				return
			}
			var rej *Rejection
			if !errors.As(err, &rej) {
				t.Fatalf("plan %v, error %v; want problems:\n%s", p, err, c.want)
			}
			if got := rej.Error(); !strings.HasPrefix(got, c.want) {
				t.Errorf("problems\n%s\nwant (a prefix)\n%s", got, c.want)
			}
		})
	}
}

func TestParseDelimiter(t *testing.T) {
	for in, want := range map[string]rune{"": 0, "auto": 0, ",": Comma, "comma": Comma, ";": Semicolon, "SEMICOLON": Semicolon, "\t": Tab, `\t`: Tab, "tab": Tab} {
		if got, err := ParseDelimiter(in); err != nil || got != want {
			t.Errorf("ParseDelimiter(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"|", ",;", " "} {
		if _, err := ParseDelimiter(in); err == nil {
			t.Errorf("ParseDelimiter(%q): no error", in)
		}
	}
	if _, err := Read(strings.NewReader("ch_1\n"), "p", Options{Batch: "b1", Delimiter: '|'}); err == nil {
		t.Error("Read with Delimiter '|': no error")
	}
}

func TestSeparated(t *testing.T) {
	for s, want := range map[string]bool{"12,50": true, "1.250": true, "1 250": true, "1'250": true, "1.250,00": true,
		"1250": false, "12,": false, ",50": false, "12,,50": false, "1e3": false, "-12,50": false, "": false, "12.5x": false} {
		if got := separated(s); got != want {
			t.Errorf("separated(%q) = %v, want %v", s, got, want)
		}
	}
}
