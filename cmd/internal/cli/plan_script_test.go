package cli

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func init() { scriptCommands["plan"] = runAs(Plan) }

// fullDisk is a stdout that takes nothing, as a full disk.
type fullDisk struct{}

func (fullDisk) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestPlanExitCodes runs plan into each exit code its --help lists and
// checks that the help names the case. plan.txtar checks the help as a
// person reads it; a failed write is out of a script's reach.
func TestPlanExitCodes(t *testing.T) {
	var help bytes.Buffer
	if code := Plan(Env{Args: []string{"--help"}, Stdin: strings.NewReader(""), Stdout: &help, Stderr: &help, Getenv: func(string) string { return "" }}); code != ExitOK {
		t.Fatalf("plan --help exited %d", code)
	}
	_, codes, ok := strings.Cut(strings.Join(strings.Fields(help.String()), " "), "Exit codes: ")
	if !ok {
		t.Fatalf("plan --help lists no exit codes:\n%s", &help)
	}

	for _, tc := range []struct {
		name      string
		args      []string
		stdin     string
		failWrite bool
		code      int
		help      string // what --help says of the case
	}{
		{"planned", []string{"--batch", "b1"}, "ch_1\n", false, ExitOK, "0 plan written"},
		{"write fails", []string{"--batch", "b1"}, "ch_1\n", true, ExitJournal, "3 writing stdout failed"},
		{"bad flag", []string{"--batch", "b 1"}, "ch_1\n", false, ExitUsage, "2 usage or input error (a bad flag"},
		{"unreadable file", []string{"--batch", "b1", "no-such-file.csv"}, "", false, ExitUsage, "an unreadable file"},
		{"input problem", []string{"--batch", "b1"}, "ch_1\nch_1\n", false, ExitUsage, "any problem in the input"},
		{"no charges", []string{"--batch", "b1"}, "", false, ExitUsage, "no charges or captures at all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout io.Writer = new(bytes.Buffer)
			if tc.failWrite {
				stdout = fullDisk{}
			}
			var stderr bytes.Buffer
			env := Env{Args: tc.args, Stdin: strings.NewReader(tc.stdin), Stdout: stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
			if code := Plan(env); code != tc.code {
				t.Errorf("plan %s exited %d, want %d; stderr:\n%s", strings.Join(tc.args, " "), code, tc.code, &stderr)
			}
			if !strings.Contains(codes, tc.help) {
				t.Errorf("plan --help does not say %q among its exit codes: %s", tc.help, codes)
			}
		})
	}
}
