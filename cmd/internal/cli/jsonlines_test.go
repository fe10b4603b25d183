package cli

import (
	"encoding/json"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdJSONLines checks that every line of the last command's stdout or
// stderr is one JSON object and carries no control byte (a terminal's
// \r or escape would break a log pipeline): `jsonlines stderr`.
func cmdJSONLines(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 || args[0] != "stdout" && args[0] != "stderr" {
		ts.Fatalf("usage: jsonlines stdout|stderr")
	}
	text := ts.ReadFile(args[0])
	if text == "" {
		ts.Fatalf("%s is empty", args[0])
	}
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if strings.ContainsFunc(line, func(r rune) bool { return r < 0x20 }) {
			ts.Fatalf("%s:%d: a control byte: %q", args[0], i+1, line)
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			ts.Fatalf("%s:%d: not a JSON object (%v): %q", args[0], i+1, err, line)
		}
	}
}
