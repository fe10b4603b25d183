package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

// scriptKey is the test-mode key every script runs with; the secrets checks
// grep for it in outputs and journals.
const scriptKey = "sk_test_scriptSECRET0123456789"

// scriptSim is a script's simulator, with counts of the API calls made.
type scriptSim = simtest.Sim

func startScriptSim(env *testscript.Env) error {
	s := simtest.Serve(stripesim.Config{Charges: stripesim.GenerateCharges(300, 1), Seed: 1})
	env.Defer(s.Close)
	env.Setenv("STRIPE_API_BASE", s.URL)
	env.Values["sim"] = s
	return nil
}

// cmdSim drives and checks the script's simulator:
//
//	sim faults JSON           set the fault knobs (stripesim.Faults as JSON)
//	sim forget-keys           forget every idempotency key (the 24-hour expiry)
//	sim calls CREATES LISTS   assert the API calls made so far
//	sim reset-calls           start counting calls from zero
//	sim refunds N             assert N live refunds, none two for one item
//	sim charge ID AMOUNT[/CURRENCY] [REFUND...]
//	                          add a charge (usd unless CURRENCY) with refunds
//	                          already on it, as an earlier run left them; REFUND is
//	                          AMOUNT[/STATUS[/BATCH/ITEM[/ATTEMPT]]], without
//	                          metadata (an old script's) unless BATCH is given
//	sim refund-status ID STATUS
//	                          assert a refund's status
func cmdSim(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("sim does not take !")
	}
	if len(args) == 0 {
		ts.Fatalf("usage: sim faults|forget-keys|calls|requests|reset-calls|refunds|charge|refund-status ...")
	}
	s := ts.Value("sim").(*scriptSim)
	switch args[0] {
	case "faults":
		var f stripesim.Faults
		if len(args) != 2 {
			ts.Fatalf("usage: sim faults JSON")
		}
		ts.Check(json.Unmarshal([]byte(args[1]), &f))
		ts.Check(s.SetFaults(f))
	case "forget-keys":
		s.ForgetKeys()
	case "reset-calls":
		s.Reset()
	case "calls":
		if len(args) != 3 {
			ts.Fatalf("usage: sim calls CREATES LISTS")
		}
		c, l := s.Creates(), s.Lists()
		if strconv.FormatInt(c, 10) != args[1] || strconv.FormatInt(l, 10) != args[2] {
			ts.Fatalf("API calls: %d creates, %d lists; want %s and %s", c, l, args[1], args[2])
		}
	case "requests":
		if len(args) != 3 {
			ts.Fatalf("usage: sim requests 'METHOD PATH' N")
		}
		if n := s.Calls(args[1]); strconv.FormatInt(n, 10) != args[2] {
			ts.Fatalf("%d requests %s, want %s", n, args[1], args[2])
		}
	case "refunds":
		if len(args) != 2 {
			ts.Fatalf("usage: sim refunds N")
		}
		byItem := map[string][]string{}
		live := 0
		for _, r := range s.Refunds() {
			if r.Status == "canceled" || r.Status == "failed" {
				continue
			}
			live++
			if b := r.Metadata[refund.MetaBatch]; b != "" {
				k := b + "/" + r.Metadata[refund.MetaItem]
				byItem[k] = append(byItem[k], r.ID)
			}
		}
		var dups []string
		for k, ids := range byItem {
			if len(ids) > 1 {
				dups = append(dups, fmt.Sprintf("%s: %v", k, ids))
			}
		}
		sort.Strings(dups)
		if len(dups) > 0 {
			ts.Fatalf("items refunded more than once: %v", dups)
		}
		if strconv.Itoa(live) != args[1] {
			ts.Fatalf("%d live refunds at the simulator, want %s", live, args[1])
		}
	case "charge":
		if len(args) < 3 {
			ts.Fatalf("usage: sim charge ID AMOUNT [REFUND...]")
		}
		value, currency, _ := strings.Cut(args[2], "/")
		amount, err := strconv.ParseInt(value, 10, 64)
		ts.Check(err)
		c := stripesim.Charge{ID: args[1], Currency: cmp.Or(currency, "usd"), Amount: amount}
		for _, spec := range args[3:] {
			c.Refunds = append(c.Refunds, seedRefund(ts, spec))
		}
		ts.Check(s.AddCharges(c))
	case "refund-status":
		if len(args) != 3 {
			ts.Fatalf("usage: sim refund-status ID STATUS")
		}
		for _, r := range s.Refunds() {
			if r.ID == args[1] {
				if r.Status != args[2] {
					ts.Fatalf("refund %s is %s, want %s", r.ID, r.Status, args[2])
				}
				return
			}
		}
		ts.Fatalf("no refund %s at the simulator", args[1])
	default:
		ts.Fatalf("unknown sim command %q", args[0])
	}
}

// seedRefund parses AMOUNT[/STATUS[/BATCH/ITEM[/ATTEMPT]]].
func seedRefund(ts *testscript.TestScript, spec string) stripesim.SeedRefund {
	parts := strings.Split(spec, "/")
	amount, err := strconv.ParseInt(parts[0], 10, 64)
	ts.Check(err)
	r := stripesim.SeedRefund{Amount: amount}
	if len(parts) > 1 {
		r.Status = parts[1]
	}
	switch len(parts) {
	case 1, 2:
	case 4, 5:
		r.Metadata = map[string]string{refund.MetaBatch: parts[2], refund.MetaItem: parts[3]}
		if len(parts) == 5 {
			r.Metadata[refund.MetaAttempt] = parts[4]
		}
	default:
		ts.Fatalf("refund %q: want AMOUNT[/STATUS[/BATCH/ITEM[/ATTEMPT]]]", spec)
	}
	return r
}
