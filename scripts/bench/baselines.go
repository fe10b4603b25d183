package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The baselines are what a user would run instead of refundkit: coreutils
// pipelines (the fastest found) and jq. They read a journal by field
// position: split at '"', a record's item is field 18 and its charge field
// 22, a plan line's item field 8. The plan holds one batch, so the item id
// alone names an item. Every baseline's answer is checked against
// refundkit's: a baseline that finds something else fails the row.

// sortCmd is sort as the baselines run it: on every core, with a buffer
// that holds a million ids without temp files, where sort takes the flags.
func (b *bench) sortCmd() string {
	if b.sortFlags == "" {
		return "sort"
	}
	return "sort " + b.sortFlags
}

// restartBaselines find what is left to do: the plan's items the journal
// holds no refund for, one a line, into out-NAME.txt.
func (b *bench) restartBaselines(plan, journal, out string) []side {
	s, p, j := b.sortCmd(), shellQuote(plan), shellQuote(journal)
	return []side{
		b.script("coreutils", out, fmt.Sprintf(`grep -F '"type":"refunded"' %s | cut -d'"' -f18 | %s | comm -13 - <(cut -d'"' -f8 %s | %s) && wait $!`, j, s, p, s)),
		b.script("jq", out, fmt.Sprintf(`jq -r 'select(.type=="refunded")|.item' %s | %s | comm -13 - <(jq -r .item %s | %s) && wait $!`, j, s, p, s)),
	}
}

// auditBaselines find the charges refunded more than once, one a line.
func (b *bench) auditBaselines(journal, out string) []side {
	s, j := b.sortCmd(), shellQuote(journal)
	return []side{
		b.script("coreutils", out, fmt.Sprintf(`grep -F '"type":"refunded"' %s | cut -d'"' -f22 | %s | uniq -d`, j, s)),
		b.script("jq", out, fmt.Sprintf(`jq -r 'select(.type=="refunded")|.charge' %s | %s | uniq -d`, j, s)),
	}
}

// script is a baseline side: a bash script, its stdout to out with the
// side's name before the extension. `wait $!` waits for a process
// substitution, so its exit status and CPU time are the script's too.
func (b *bench) script(name, out, script string) side {
	ext := filepath.Ext(out)
	out = strings.TrimSuffix(out, ext) + "-" + name + ext
	return side{
		name:  name,
		kind:  baseline,
		cmd:   cmdSpec{argv: []string{"bash", "-o", "pipefail", "-c", script}, stdout: out},
		shown: "( " + b.short(script) + " ) > " + b.short(out),
		check: exitIs(0),
	}
}

// readLines reads a baseline's answer: its lines, sorted.
func readLines(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Fields(string(data))
	slices.Sort(lines)
	return lines, nil
}

// sameAnswer checks that every side found the same want ids as the first.
func sameAnswer(what string, want int, names []string, answers [][]string) error {
	for i, a := range answers {
		if len(a) != want || !slices.Equal(a, answers[0]) {
			var all []string
			for k, x := range answers {
				all = append(all, fmt.Sprintf("%s %d (%s)", names[k], len(x), abbrev(x)))
			}
			return fmt.Errorf("%s: want the same %d from every side, %s found other ones: %s", what, want, names[i], strings.Join(all, "; "))
		}
	}
	return nil
}

// abbrev lists a few ids of a long list.
func abbrev(ids []string) string {
	if len(ids) <= 4 {
		return strings.Join(ids, " ")
	}
	return fmt.Sprintf("%s ... %s", strings.Join(ids[:3], " "), ids[len(ids)-1])
}
