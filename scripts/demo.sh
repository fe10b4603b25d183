#!/usr/bin/env bash
# demo: refund a sample batch against a local simulator of the provider's
# API, kill the run with SIGKILL halfway, resume it, and prove that nothing
# was refunded twice.
#
#   make demo                    (builds bin/ first, then runs this: Stripe)
#   make demo PROVIDER=paypal    (the same with PayPal captures)
#   make demo PROVIDER=adyen     (Adyen: the simulator posts signed
#                                 notifications to bin/adyen-webhook, and a
#                                 last run settles every refund from them)
#
# Needs only bash, Go and this repository: the simulator is bin/stripe-sim,
# the API key is a fake test key, everything lives in a temp dir that is
# removed at the end, and every process started here is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=bin
PROVIDER=${PROVIDER:-stripe}
BATCH=demo-$(date +%Y%m%d)
RATE=40 # requests per second: the batch takes about five seconds
# provider NAME CHARGES CREATE_ROUTE ITEM_FIELD SEED...: the simulator's
# seed and what the demo names and checks, by provider.
provider() { NAME=$1 CHARGES=$2 CREATE_ROUTE=$3 ITEM_FIELD=$4; shift 4; SEED=("$@"); }
case $PROVIDER in
stripe)
	provider Stripe testdata/charges/charges.csv 'POST /v1/refunds' refundkit_item --charges 200
	# A fake test-mode key: the simulator accepts any sk_test_ key, and
	# real Stripe never sees this one.
	export STRIPE_API_KEY=sk_test_refundkit_demo_not_a_real_key
	SECRET=$STRIPE_API_KEY
	;;
paypal)
	provider PayPal testdata/captures/captures.csv 'POST /v2/payments/captures/{id}/refund' custom_id --captures 200
	# Fake app credentials: the simulator takes any, PayPal never sees these.
	export PAYPAL_CLIENT_ID=refundkit-demo-client PAYPAL_CLIENT_SECRET=refundkit_demo_secret_not_real
	SECRET=$PAYPAL_CLIENT_SECRET
	;;
adyen)
	provider Adyen testdata/adyen/refunds.csv 'POST /v71/payments/{paymentPspReference}/refunds' reference --adyen-payments-file testdata/adyen/payments.jsonl
	# Fake credentials and HMAC key: the simulator and the receiver take
	# them from the environment, as refund does; Adyen never sees these.
	export ADYEN_API_KEY=refundkit_demo_adyen_key_not_real ADYEN_MERCHANT_ACCOUNT=RefundkitSim
	export ADYEN_HMAC_KEY=5EC2E7D0A2F54C6B8E1A7F3D9B0C4E6A1D2F3A4B5C6D7E8F9A0B1C2D3E4F5A6B
	SECRET=$ADYEN_API_KEY
	;;
*) echo "demo: PROVIDER=$PROVIDER: want stripe, paypal or adyen" >&2; exit 2 ;;
esac
WORK=$(mktemp -d "${TMPDIR:-/tmp}/refundkit-demo.XXXXXX")
JOURNAL=$WORK/demo.jsonl
PLAN=$WORK/plan.jsonl

started=() # pids of the processes this script started
cleanup() {
	local pid
	for pid in "${started[@]}"; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$WORK"
}
trap cleanup EXIT

bold=$'\e[1m' green=$'\e[32m' red=$'\e[31m' plain=$'\e[0m'
if [[ ! -t 1 ]]; then bold='' green='' red='' plain=''; fi
step=0
say() { step=$((step + 1)); printf '\n%s%d. %s%s\n' "$bold" "$step" "$*" "$plain"; }
note() { printf '   %s\n' "$*"; }
ok() { printf '   %sok%s  %s\n' "$green" "$plain" "$*"; }
fail() {
	printf '   %sFAIL%s  %s\n' "$red" "$plain" "$*"
	printf '\n%sdemo: a check failed (rerun with bash -x scripts/demo.sh for detail)%s\n' "$red" "$plain" >&2
	exit 1
}
check() { # check WHAT GOT WANT
	if [[ "$2" == "$3" ]]; then ok "$1: $2"; else fail "$1: got $2, want $3"; fi
}

for b in plan refund stripe-sim adyen-webhook webhook; do
	[[ -x $BIN/$b ]] || { echo "demo: $BIN/$b is missing: run make build" >&2; exit 2; }
done

# sim_get PATH prints the body of GET PATH on the simulator, through bash's
# /dev/tcp so that curl is not needed.
sim_get() {
	local hostport=${SIM_URL#http://}
	exec 5<>"/dev/tcp/${hostport%:*}/${hostport##*:}"
	printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" "$hostport" >&5
	sed '1,/^\r$/d' <&5
	exec 5<&-
}
# sim_post PATH posts an empty body to PATH on the simulator.
sim_post() {
	local hostport=${SIM_URL#http://}
	exec 5<>"/dev/tcp/${hostport%:*}/${hostport##*:}"
	printf 'POST %s HTTP/1.0\r\nHost: %s\r\nContent-Length: 0\r\n\r\n' "$1" "$hostport" >&5
	sed '1,/^\r$/d' <&5
	exec 5<&-
}
# json_int FIELD reads "FIELD":N from stdin (flat JSON from the simulator).
# The first one: later sections (paypal, adyen) reuse some names.
json_int() { grep -o "\"$1\":[0-9]*" | head -1 | cut -d: -f2; }
# created reads the refunds the provider's routes created from the stats
# on stdin: Adyen's are counted in their own section.
created() {
	if [[ $PROVIDER == adyen ]]; then sed 's/.*"adyen"://' | json_int refunds_created; else json_int refunds_created; fi
}

NOTES=() # refund's and audit's --notifications, with Adyen
if [[ $PROVIDER == adyen ]]; then
	say "Start the notification receiver (bin/adyen-webhook): it verifies each notification's HMAC and keeps it, fsynced, before it answers [accepted]"
	mkfifo "$WORK/wh.url"
	exec 4<>"$WORK/wh.url"
	$BIN/adyen-webhook --listen 127.0.0.1:0 --out "$WORK/notes.jsonl" --addr-file "$WORK/wh.url" >"$WORK/wh.stats" 2>"$WORK/wh.log" &
	started+=($!)
	read -r -t 20 WH_URL <&4 || { cat "$WORK/wh.log" >&2; fail "the receiver did not start"; }
	exec 4<&-
	SEED+=(--adyen-notify-url "$WH_URL/adyen/notifications")
	NOTES=(--notifications "$WORK/notes.jsonl")
	note "listening on $WH_URL/adyen/notifications, keeping notifications in notes.jsonl"
fi

say "Start the $NAME simulator (bin/stripe-sim) on a free loopback port, with the 200 payments $CHARGES refers to"
mkfifo "$WORK/sim.url"
exec 3<>"$WORK/sim.url" # opened read-write so the open never blocks
# --latency: each call takes a while, as a real API's do, so the kill below
# lands with calls in flight and the resume shows the in-doubt path.
$BIN/stripe-sim --addr 127.0.0.1:0 --addr-file "$WORK/sim.url" --latency 300ms "${SEED[@]}" >"$WORK/sim.stats" 2>"$WORK/sim.log" &
started+=($!)
# The simulator writes its URL into the pipe once it listens: no sleep, no poll.
read -r -t 20 SIM_URL <&3 || { cat "$WORK/sim.log" >&2; fail "the simulator did not start"; }
exec 3<&-
export STRIPE_API_BASE=$SIM_URL PAYPAL_API_BASE=$SIM_URL ADYEN_API_BASE=$SIM_URL
note "listening on $SIM_URL (fake credentials ${SECRET:0:8}..., set inside this script)"

say "Plan the batch: bin/plan turns the support team's CSV export into one JSON line per refund"
$BIN/plan --batch "$BATCH" "$CHARGES" >"$PLAN" 2>"$WORK/plan.err"
planned=$(($(wc -l <"$PLAN")))
note "$(cat "$WORK/plan.err")"
note "first item: $(head -1 "$PLAN")"

say "Refund it: bin/plan ... | bin/refund --provider $PROVIDER --journal demo.jsonl --rate $RATE, and kill -9 the refund process midway"
note "each refund call is preceded by an fsynced intent in the journal and followed by its fsynced outcome"
: >"$WORK/run1.out" # exists before the loop below counts its lines
$BIN/plan --batch "$BATCH" "$CHARGES" 2>/dev/null |
	$BIN/refund --provider "$PROVIDER" --journal "$JOURNAL" "${NOTES[@]}" --rate "$RATE" >"$WORK/run1.out" 2>"$WORK/run1.err" &
refund_pid=$! # the last process of the pipeline
started+=($refund_pid)
kill_after=$((planned / 3))
# Kill once a third is done and the journal shows calls in flight (intents
# without an outcome), so the resume has items in doubt to look up.
in_flight() { echo $(($(grep -c '"type":"intent"' "$JOURNAL") - $(grep -c '"type":"refunded"' "$JOURNAL"))); }
while (($(wc -l <"$WORK/run1.out") < kill_after)) || (($(in_flight) < 2)); do
	kill -0 "$refund_pid" 2>/dev/null || fail "refund ended before it could be killed: $(cat "$WORK/run1.err")"
	sleep 0.02
done
kill -9 "$refund_pid"
status=0
{ wait "$refund_pid"; } 2>/dev/null || status=$? # quiet: bash would print "Killed"
check "refund's exit status after SIGKILL (128+9: killed, no clean-up ran)" "$status" 137
note "it had printed $(wc -l <"$WORK/run1.out") results when it died; its stderr has no summary: $(wc -l <"$WORK/run1.err") lines"

say "Look at what the journal holds after the crash"
intents=$(grep -c '"type":"intent"' "$JOURNAL" || true)
done_before=$(grep -c '"type":"refunded"' "$JOURNAL" || true)
records=$(grep -vc '"type":"commit"' "$JOURNAL" || true) # commit lines frame the records: not records themselves
in_doubt=$((intents - done_before))
note "$records records: $intents intents, $done_before refunded outcomes (and $(grep -c '"type":"commit"' "$JOURNAL") commit lines, each sealing the records fsynced together)"
note "intents without an outcome: $in_doubt; those items are in doubt, their calls in flight when the process died: each may or may not have reached $NAME"
note "last record: $(tail -c 400 "$JOURNAL" | tail -1)"
note "a dry run reads the journal and says what a resume would do (no API call):"
$BIN/plan --batch "$BATCH" "$CHARGES" 2>/dev/null |
	$BIN/refund --provider "$PROVIDER" --journal "$JOURNAL" "${NOTES[@]}" --dry-run >/dev/null 2>"$WORK/dry.err" || true
note "$(grep 'items:' "$WORK/dry.err" | cut -d';' -f1)"

say "Resume: run the very same pipeline again"
before_creates=$(sim_get /_sim/stats | created)
note "the simulator holds $before_creates refunds so far"
status=0
$BIN/plan --batch "$BATCH" "$CHARGES" 2>/dev/null |
	$BIN/refund --provider "$PROVIDER" --journal "$JOURNAL" "${NOTES[@]}" --rate "$RATE" >"$WORK/run2.out" 2>"$WORK/run2.err" || status=$?
note "$(grep 'items:' "$WORK/run2.err")"
check "refund's exit status" "$status" 0
summary=$(grep 'items:' "$WORK/run2.err")
skipped=$(grep -o '[0-9]* skipped' <<<"$summary" | cut -d' ' -f1)
refunded=$(grep -o '[0-9]* refunded,' <<<"$summary" | cut -d' ' -f1)
reconciled=$(grep -o '[0-9]* reconciled' <<<"$summary" | cut -d' ' -f1)
if [[ $PROVIDER == adyen ]]; then
	pending=$(grep -o '[0-9]* pending' <<<"$summary" | cut -d' ' -f1)
	note "Adyen answers a refund only \"received\": each is journaled pending until its notification tells how it ended"
	check "items settled from a notification, skipped, or received by Adyen now (pending): every planned item, none failed or in doubt" "$((skipped + refunded + pending))" "$planned"
	check "items settled or skipped with zero API calls: at least those done before the kill" "$((skipped + refunded >= done_before ? 1 : 0))" 1
	note "an item in doubt was sent again under its own Idempotency-Key (Adyen answers for the first call: no second refund), unless a notification had already named its refund"

	say "Wait for every notification (POST /_sim/adyen/flush), then run the same pipeline once more: it settles each refund from its notification"
	sim_post /_sim/adyen/flush >/dev/null
	before_settle=$(sim_get /_sim/stats | created)
	status=0
	$BIN/plan --batch "$BATCH" "$CHARGES" 2>/dev/null |
		$BIN/refund --provider "$PROVIDER" --journal "$JOURNAL" "${NOTES[@]}" --rate "$RATE" >"$WORK/run3.out" 2>"$WORK/run3.err" || status=$?
	note "$(grep 'items:' "$WORK/run3.err")"
	check "refund's exit status" "$status" 0
	check "items refunded, by the journal" "$(grep -c '"status":"succeeded"' "$JOURNAL")" "$planned"
	check "refund calls the settling run sent" "$(($(sim_get /_sim/stats | created) - before_settle))" 0
else
	check "items skipped with zero API calls (refunded before the kill)" "$skipped" "$done_before"
	check "items refunded now (the rest)" "$refunded" "$((planned - done_before))"
	adopted=$((before_creates - done_before))
	note "items in doubt: $in_doubt, each looked up at $NAME before any call ($reconciled reconciled): $adopted had been refunded just before the kill and were adopted, not sent again; the other $((in_doubt - adopted)) had not reached $NAME and were sent under their same key"
fi

say "Ask the simulator what it did (GET /_sim/stats, /_sim/refunds)"
stats=$(sim_get /_sim/stats)
created=$(created <<<"$stats")
# (the request counts come first; later maps name the same routes)
posts=$(sed 's/"refunds_created".*//' <<<"$stats" | grep -o "\"$CREATE_ROUTE\":[0-9]*" | head -1 | cut -d: -f2)
check "refunds created at $NAME over both runs" "$created" "$planned"
if [[ $PROVIDER == adyen ]]; then
	# No look-up exists: an item in doubt is sent again under its same key,
	# and Adyen answers it from that key (replayed) or asks to wait (704,
	# a key in use); either way no second refund (checked above).
	adyen=$(sed 's/.*"adyen"://' <<<"$stats")
	again=$(($(json_int replayed <<<"$adyen") + $(json_int key_in_use <<<"$adyen") + $(json_int rate_limited <<<"$stats")))
	check "refund create calls over both runs beyond one per planned item, each under its item's own key again (replayed or asked to wait)" "$((posts - planned))" "$again"
else
	check "refund create calls over both runs (one per planned item, not more)" "$posts" "$planned"
fi
if [[ $PROVIDER == adyen ]]; then
	sim_get /_sim/adyen/refunds >"$WORK/refunds.jsonl"
else
	sim_get /_sim/refunds >"$WORK/refunds.jsonl"
fi
live_items=$(grep -v '"status":"canceled"' "$WORK/refunds.jsonl" | grep -o "\"$ITEM_FIELD\":\"[^\"]*\"" | sort)
check "planned items with a refund" "$(uniq <<<"$live_items" | wc -l)" "$planned"
check "items with more than one refund" "$(uniq -d <<<"$live_items" | wc -l)" 0

say "Audit the journal"
if [[ -x $BIN/audit ]]; then
	status=0
	$BIN/audit --plan "$PLAN" "$JOURNAL" >"$WORK/audit.out" 2>"$WORK/audit.err" || status=$?
	sed 's/^/   /' "$WORK/audit.err"
	check "bin/audit --plan plan.jsonl demo.jsonl (offline) exit status" "$status" 0
	status=0
	if [[ $PROVIDER == adyen ]]; then
		note "--provider adyen reads the refunds Adyen told of in its notifications (Adyen has no API that lists them)"
	else
		note "--provider $PROVIDER lists every payment's refunds at $NAME (here the simulator, so --rate 0: no need to spare a rate limit)"
	fi
	$BIN/audit --provider "$PROVIDER" "${NOTES[@]}" --rate 0 --plan "$PLAN" "$JOURNAL" >"$WORK/audit-provider.out" 2>"$WORK/audit-provider.err" || status=$?
	sed 's/^/   /' "$WORK/audit-provider.err"
	check "bin/audit --provider $PROVIDER --plan plan.jsonl demo.jsonl exit status" "$status" 0
else
	note "bin/audit is not built in this checkout: skipped (the simulator's own records were checked above)"
fi

if [[ $PROVIDER == stripe ]]; then
	say "Refunds that Stripe answers pending, settled by its signed events: bin/webhook keeps them, and a rerun reads them instead of asking Stripe"
	# A fake signing secret, as the API key above: the receiver, the
	# simulator and refund read it from the environment; Stripe never sees it.
	export STRIPE_WEBHOOK_SECRET=whsec_refundkit_demo_not_a_real_secret
	mkfifo "$WORK/whs.url" "$WORK/psim.url"
	exec 4<>"$WORK/whs.url"
	$BIN/webhook --listen 127.0.0.1:0 --stripe "$WORK/events.jsonl" --addr-file "$WORK/whs.url" >"$WORK/whs.stats" 2>"$WORK/whs.log" &
	whs_pid=$!
	started+=($whs_pid)
	read -r -t 20 WHS_URL <&4 || { cat "$WORK/whs.log" >&2; fail "the receiver did not start"; }
	exec 4<&-
	note "bin/webhook listens on $WHS_URL/stripe/events: it verifies each event's Stripe-Signature and keeps it, fsynced, before it answers 200"
	# A simulator of its own (the one above answers every refund at once):
	# each new refund pending for 200ms, then settled, and every change
	# posted to the receiver as a signed event, retried until kept.
	exec 3<>"$WORK/psim.url"
	$BIN/stripe-sim --addr 127.0.0.1:0 --addr-file "$WORK/psim.url" --charges 3 --stripe-pending-share 1 --stripe-pending-for 200ms \
		--stripe-events-url "$WHS_URL/stripe/events" >"$WORK/psim.stats" 2>"$WORK/psim.log" &
	started+=($!)
	read -r -t 20 PSIM_URL <&3 || { cat "$WORK/psim.log" >&2; fail "the second simulator did not start"; }
	exec 3<&-
	note "a second simulator on $PSIM_URL answers every new refund pending and posts Stripe's events to the receiver"
	printf 'ch_sim%07d\n' 1 2 3 | $BIN/plan --batch "$BATCH-pending" >"$WORK/pending-plan.jsonl" 2>/dev/null
	status=0
	STRIPE_API_BASE=$PSIM_URL $BIN/refund --provider stripe --journal "$WORK/pending.jsonl" --rate 0 "$WORK/pending-plan.jsonl" >"$WORK/pending1.out" 2>"$WORK/pending1.err" || status=$?
	note "$(grep 'items:' "$WORK/pending1.err")"
	check "refund's exit status" "$status" 0
	check "items Stripe answered pending (the journal keeps each refund's id)" "$(grep -c '"status":"pending"' "$WORK/pending1.out")" 3
	note "POST /_sim/stripe/events/flush (as curl -sS -X POST would) returns once the simulator settled them and the receiver kept every event: no sleep"
	check "pending refunds whose events were not delivered" "$(SIM_URL=$PSIM_URL sim_post /_sim/stripe/events/flush | json_int pending_untold)" 0
	note "rerun the same plan and journal with --notifications events.jsonl:"
	status=0
	STRIPE_API_BASE=$PSIM_URL $BIN/refund --provider stripe --journal "$WORK/pending.jsonl" --notifications "$WORK/events.jsonl" --rate 0 "$WORK/pending-plan.jsonl" >"$WORK/pending2.out" 2>"$WORK/pending2.err" || status=$?
	note "$(grep 'items:' "$WORK/pending2.err")"
	check "refund's exit status" "$status" 0
	check "items refunded" "$(grep -c '"status":"refunded"' "$WORK/pending2.out")" 3
	check "refunds settled from the events" "$(grep -o "[0-9]* refunds settled by Stripe's events, with no request" "$WORK/pending2.err" | cut -d' ' -f1)" 3
	pstats=$(SIM_URL=$PSIM_URL sim_get /_sim/stats)
	note "GET /_sim/stats, Stripe's requests: $(grep -o '"[A-Z]* /v1/\(charges\|refunds\)[^"]*":[0-9]*' <<<"${pstats%%\"refunds_created\"*}" | paste -sd, -)"
	note "and its events: $(grep -o '"events":{[^}]*}' <<<"$pstats")"
	check "refunds the rerun looked up at Stripe (GET /v1/refunds/{id})" "$(json_int 'GET /v1/refunds/{id}' <<<"$pstats")" 0
	if [[ -x $BIN/audit ]]; then
		status=0
		$BIN/audit --plan "$WORK/pending-plan.jsonl" "$WORK/pending.jsonl" >"$WORK/pending-audit.out" 2>"$WORK/pending-audit.err" || status=$?
		sed 's/^/   /' "$WORK/pending-audit.err"
		check "bin/audit --plan pending-plan.jsonl pending.jsonl exit status" "$status" 0
	fi
	kill -INT "$whs_pid"
	status=0
	wait "$whs_pid" || status=$?
	check "bin/webhook's exit status after SIGINT" "$status" 0
	note "its counters (stdout): $(cat "$WORK/whs.stats")"
	note "$(grep 'stopped' "$WORK/whs.log")"
fi

for s in "$SECRET" ${ADYEN_HMAC_KEY:+"$ADYEN_HMAC_KEY"} ${STRIPE_WEBHOOK_SECRET:+"$STRIPE_WEBHOOK_SECRET"}; do
	if grep -rqF "$s" "$WORK"/*.out "$WORK"/*.err "$WORK"/*.log "$WORK"/*.stats "$WORK"/*.jsonl; then
		fail "a secret appears in an output or a journal"
	fi
done
ok "the secrets appear in no output and not in the journal"

printf '\n%sdemo: clean: %d planned items, %d refunds at %s, none twice; the run killed at %d refunds resumed without repeating one%s\n' \
	"$green" "$planned" "$created" "$NAME" "$done_before" "$plain"
