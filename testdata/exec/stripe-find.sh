#!/bin/sh
# The find command of `refund --provider exec` (README, "Any refund API")
# for Stripe's API or refundkit's simulator: every refund of the payment
# on stdin, from GET /v1/refunds?charge= (or payment_intent=), all pages,
# one JSON line each.
#
#   refund --provider exec --exec-find testdata/exec/stripe-find.sh ...
#
# Reads STRIPE_API_KEY and STRIPE_API_BASE (default https://api.stripe.com)
# from the environment. Needs curl and jq.
set -u
base=${STRIPE_API_BASE:-https://api.stripe.com}
payment=$(cat) || exit 75
field=$(printf '%s' "$payment" | jq -r 'if .charge then "charge" else "payment_intent" end') || exit 75
body=$(mktemp) || exit 75
trap 'rm -f "$body"' EXIT
after=
while :; do
	set -- --data-urlencode "$field=$REFUNDKIT_TARGET" --data-urlencode limit=100
	[ -z "$after" ] || set -- "$@" --data-urlencode "starting_after=$after"
	status=$(printf 'header = "Authorization: Bearer %s"\n' "$STRIPE_API_KEY" |
		curl -sS -K - -G -o "$body" -w '%{http_code}' "$@" "$base/v1/refunds")
	rc=$?
	if [ $rc -ne 0 ]; then
		echo "curl failed ($rc): retry later" >&2
		exit 75
	fi
	case $status in
	200) ;;
	401 | 403)
		# The key refused: the contract's exit 77 halts the run; asking
		# again cannot help.
		echo "stripe answered $status: $(jq -r '.error.message // empty' "$body" 2>/dev/null)" >&2
		exit 77
		;;
	409 | 429 | 500 | 502 | 503 | 504)
		echo "stripe answered $status: retry later" >&2
		exit 75
		;;
	*)
		echo "stripe answered $status: $(jq -r '.error.message // empty' "$body" 2>/dev/null)" >&2
		exit 1
		;;
	esac
	jq -c '.data[] | {id, status, amount, currency, created, charge, payment_intent,
	    failure_reason, batch: (.metadata.refundkit_batch // ""), item: (.metadata.refundkit_item // ""),
	    attempt: (.metadata.refundkit_attempt // null)}' "$body" || exit 1
	[ "$(jq -r .has_more "$body")" = true ] || exit 0
	after=$(jq -r '.data[-1].id' "$body")
done
