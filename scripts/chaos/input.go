package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

const whatHostile = "Plans of five lines where one line is hostile: a valid line randomly mutated (bytes flipped, cut, inserted, repeated, newlines included), or one of a fixed list: a line over 1 MiB, invalid UTF-8, NUL and control bytes, amounts negative, zero, fractional, in exponent form, as strings or beyond 64 bits, unknown, repeated or mis-cased fields, both or neither of charge and payment_intent, malformed ids, reserved metadata keys, nested metadata, trailing data, JSON that is not an object, and an item listed twice. " +
	"Fed to `refund` on stdin or as a file, the plan must be refused at the first bad line with exit 2 and `<stdin>:N:` (or `file:N:`), with no panic, and no key may reach the simulator for that line or any after it; every valid line before it must be refunded, once. " +
	"Whether a mutated line is bad is decided by the library's own `refund.ParseItem` (the fixed cases must all be bad, whatever it says), so the binary is checked to stop where the parser says and to send nothing past it."

// linesPerCase is the size of each hostile plan.
const linesPerCase = 5

// fixedHostile are lines that must be refused, built from a valid line's
// batch, item and charge.
var fixedHostile = []struct {
	name string
	line func(batch, item, charge string) string
}{
	{"line over 1 MiB", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"reason":"%s"}`, b, i, c, strings.Repeat("x", refund.MaxLineBytes+10))
	}},
	{"invalid UTF-8 in the item", func(b, i, c string) string { return fmt.Sprintf(`{"batch":%q,"item":"%s\xff","charge":%q}`, b, i, c) }},
	{"invalid UTF-8 in metadata", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"metadata":{"note":"\xc3\x28"}}`, b, i, c)
	}},
	{"NUL byte", func(b, i, c string) string { return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":"%s\x00"}`, b, i, c) }},
	{"control byte in a string", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"reason":"dup\x01licate"}`, b, i, c)
	}},
	{"negative amount", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"amount":-5}`, b, i, c)
	}},
	{"zero amount", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"amount":0}`, b, i, c)
	}},
	{"fractional amount", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"amount":1.5}`, b, i, c)
	}},
	{"amount in exponent form", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"amount":1e3}`, b, i, c)
	}},
	{"amount as a string", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"amount":"100"}`, b, i, c)
	}},
	{"amount beyond int64", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"amount":9223372036854775808}`, b, i, c)
	}},
	{"amount of 40 digits", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"amount":%s}`, b, i, c, strings.Repeat("9", 40))
	}},
	{"unknown field", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"refund_all":true}`, b, i, c)
	}},
	{"repeated field", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"charge":"ch_sim0000001"}`, b, i, c)
	}},
	{"mis-cased field", func(b, i, c string) string { return fmt.Sprintf(`{"batch":%q,"item":%q,"Charge":%q}`, b, i, c) }},
	{"charge and payment_intent", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"payment_intent":"pi_sim0000001"}`, b, i, c)
	}},
	{"neither charge nor payment_intent", func(b, i, c string) string { return fmt.Sprintf(`{"batch":%q,"item":%q}`, b, i) }},
	{"no batch", func(b, i, c string) string { return fmt.Sprintf(`{"item":%q,"charge":%q}`, i, c) }},
	{"malformed charge id", func(b, i, c string) string { return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":"re_%s"}`, b, i, c) }},
	{"item id of 200 bytes", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q}`, b, strings.Repeat("i", 200), c)
	}},
	{"batch with a colon", func(b, i, c string) string { return fmt.Sprintf(`{"batch":"%s:x","item":%q,"charge":%q}`, b, i, c) }},
	{"reserved metadata key", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"metadata":{"refundkit_item":"other"}}`, b, i, c)
	}},
	{"nested metadata", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q,"metadata":{"a":{"b":"c"}}}`, b, i, c)
	}},
	{"trailing data", func(b, i, c string) string { return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q} x`, b, i, c) }},
	{"two objects", func(b, i, c string) string {
		return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":%q}{"batch":%q,"item":"x","charge":%q}`, b, i, c, b, c)
	}},
	{"byte order mark", func(b, i, c string) string {
		return fmt.Sprintf("\ufeff"+`{"batch":%q,"item":%q,"charge":%q}`, b, i, c)
	}},
	{"JSON array", func(b, i, c string) string { return fmt.Sprintf(`[%q,%q,%q]`, b, i, c) }},
	{"JSON null", func(b, i, c string) string { return `null` }},
	{"cut object", func(b, i, c string) string { return fmt.Sprintf(`{"batch":%q,"item":%q,"charge":"%s`, b, i, c) }},
	{"item listed twice", nil}, // the line before, again
}

func runHostile(r *rig, sz sizes) {
	r.t.NoAudit = true // many tiny batches, each checked by itself
	cases := len(fixedHostile) + sz.HostileCases
	charges := r.serveCharges(cases*linesPerCase, stripesim.Faults{})

	hostile, mutantsRefused, mutantsValid := 0, 0, 0
	for c := range cases {
		batch := fmt.Sprintf("hostile-%d", c)
		lines := make([][]byte, linesPerCase)
		for i := range lines {
			lines[i] = fmt.Appendf(nil, `{"batch":%q,"item":"i%d","charge":%q}`, batch, i+1, charges[c*linesPerCase+i].ID)
		}
		at := r.rng.IntN(linesPerCase)
		name := "a random mutation"
		mustBeBad := c < len(fixedHostile)
		if mustBeBad {
			fx := fixedHostile[c]
			name = fx.name
			if fx.line == nil {
				at = max(at, 1)
				lines[at] = lines[at-1]
			} else {
				lines[at] = []byte(fx.line(batch, fmt.Sprintf("i%d", at+1), charges[c*linesPerCase+at].ID))
			}
		} else {
			lines[at] = mutate(r, lines[at])
		}
		input := append(bytes.Join(lines, []byte("\n")), '\n')
		bad, accepted := firstBadLine(input)
		if mustBeBad && bad == 0 {
			r.t.Errorf("hostile line %q (%s) is accepted by refund.ParseItem", truncate(lines[at], 120), name)
		}
		hostile++
		if !mustBeBad {
			if bad > 0 {
				mutantsRefused++
			} else {
				mutantsValid++
			}
		}
		r.checkHostileRun(c, input, bad, accepted, fmt.Sprintf("%s written at line %d", name, at+1), lines[at])
	}
	r.t.inject("hostile plan lines", hostile)
	r.t.note("seed %d: %d fixed hostile lines, all refused; %d random mutations, %d refused and %d still valid plan items (sent as such)",
		r.seed, len(fixedHostile), sz.HostileCases, mutantsRefused, mutantsValid)

	// No charge has more refunds than the accepted lines naming it, and
	// every line before the bad one was refunded (checked per case in
	// checkHostileRun).
	r.checkPayments()
}

// checkHostileRun feeds one hostile plan to refund and checks where it
// stopped and what reached the simulator.
func (r *rig) checkHostileRun(c int, input []byte, bad int, accepted []refund.Item, name string, line []byte) {
	j := r.path(fmt.Sprintf("hostile-%d.jsonl", c))
	keysBefore := r.sim.Creates()
	var pr *proc
	inName := "<stdin>"
	args := []string{"--journal", j, "--rate", "0", "--progress", "never", "-j", "2"}
	if c%2 == 0 {
		pr = r.start(bytes.NewReader(input), "refund", args...)
	} else {
		inName = r.path(fmt.Sprintf("hostile-%d.plan", c))
		r.must(os.WriteFile(inName, input, 0o600))
		pr = r.start(nil, "refund", append(args, inName)...)
	}
	r.wait(pr)
	what := fmt.Sprintf("plan with %s %q", name, truncate(line, 80))
	r.t.Items += len(accepted)
	allowed := map[string]bool{}
	for _, it := range accepted {
		allowed[refund.IdempotencyKey(it.Batch, it.Item, 1)] = true
		r.extra[r.paymentOf(it.Target())]++ // each accepted line is meant to run
	}
	if bad > 0 {
		r.expectExit(pr, what, exitUsage)
		if want := fmt.Sprintf("%s:%d:", inName, bad); !strings.Contains(pr.Stderr.String(), want) {
			r.t.Errorf("%s: the message does not name %s: %s", what, want, firstLines(pr.Stderr.String(), 2))
		}
	} else {
		r.expectExit(pr, what, 0, exitFailed)
	}
	for _, key := range r.sim.KeysSince(keysBefore) {
		if !allowed[key] {
			r.t.Errorf("%s: key %s reached the simulator for a line at or after the bad one", what, key)
		}
	}
	// The lines before the bad one as they were written must each have
	// their refund, unless a mutated line names the same charge (then
	// either may be the one Stripe refused as already refunded).
	live := r.sim.LiveRefunds(fmt.Sprintf("hostile-%d", c))
	named := map[string]int{}
	for _, it := range accepted {
		named[it.Charge]++
	}
	for _, it := range accepted {
		if validOriginal(it, c) && named[it.Charge] == 1 && len(live[it.Item]) == 0 {
			r.t.Missing++
			r.t.Errorf("%s: line for item %s was valid but nothing was refunded", what, it.Item)
		}
	}
}

// validOriginal reports whether it is one of case c's lines as written,
// item i<n> of its batch on its n-th charge, not a mutation that happens
// to parse.
func validOriginal(it refund.Item, c int) bool {
	var n int
	if _, err := fmt.Sscanf(it.Item, "i%d", &n); err != nil || n < 1 || n > linesPerCase {
		return false
	}
	return it.Batch == fmt.Sprintf("hostile-%d", c) && it.Charge == fmt.Sprintf("ch_sim%07d", c*linesPerCase+n) && it.Amount == 0 && it.PaymentIntent == "" && len(it.Metadata) == 0
}

// firstBadLine is the line refund must stop at, 1-based, as refund reads a
// plan: lines split at '\n' and at most refund.MaxLineBytes long, blank
// lines skipped, each parsed by refund.ParseItem, an item listed twice
// refused; 0 if none. accepted are the items of the lines before it.
func firstBadLine(input []byte) (bad int, accepted []refund.Item) {
	sc := bufio.NewScanner(bytes.NewReader(input))
	sc.Buffer(make([]byte, 64*1024), refund.MaxLineBytes)
	seen := map[string]bool{}
	n := 0
	for sc.Scan() {
		n++
		if len(bytes.Trim(sc.Bytes(), " \t\r")) == 0 {
			continue
		}
		it, err := refund.ParseItem(sc.Bytes())
		if err != nil || seen[it.Batch+"\x00"+it.Item] {
			return n, accepted
		}
		seen[it.Batch+"\x00"+it.Item] = true
		accepted = append(accepted, it)
	}
	if sc.Err() != nil {
		return n + 1, accepted
	}
	return 0, accepted
}

// mutate changes line at one to four random places: a byte replaced by any
// byte (a newline too), a span deleted, random bytes inserted, a span
// repeated.
func mutate(r *rig, line []byte) []byte {
	out := bytes.Clone(line)
	for range 1 + r.rng.IntN(4) {
		if len(out) == 0 {
			out = append(out, '{')
		}
		at := r.rng.IntN(len(out))
		span := min(1+r.rng.IntN(8), len(out)-at)
		switch r.rng.IntN(4) {
		case 0:
			out[at] = byte(r.rng.IntN(256))
		case 1:
			out = append(out[:at], out[at+span:]...)
		case 2:
			ins := make([]byte, span)
			for i := range ins {
				ins[i] = byte(r.rng.IntN(256))
			}
			out = append(out[:at], append(ins, out[at:]...)...)
		case 3:
			out = append(out[:at+span], append(bytes.Clone(out[at:at+span]), out[at+span:]...)...)
		}
	}
	return out
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
