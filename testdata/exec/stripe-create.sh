#!/bin/sh
# The create command of `refund --provider exec` (README, "Any refund API")
# for Stripe's API or refundkit's simulator: one POST /v1/refunds under
# refundkit's idempotency key, its answer printed as the contract's object.
#
#   refund --provider exec --exec-create testdata/exec/stripe-create.sh ...
#
# Reads STRIPE_API_KEY and STRIPE_API_BASE (default https://api.stripe.com)
# from the environment. Needs curl and jq. The key goes to curl through its
# config on stdin, never on a command line (process listings show those).
set -u
base=${STRIPE_API_BASE:-https://api.stripe.com}
item=$(cat) || exit 75 # nothing was sent
body=$(mktemp) || exit 75
trap 'rm -f "$body"' EXIT

field=$(printf '%s' "$item" | jq -r 'if .charge then "charge" else "payment_intent" end') || exit 75
set -- --data-urlencode "$field=$REFUNDKIT_TARGET" \
	--data-urlencode "metadata[refundkit_batch]=$REFUNDKIT_BATCH" \
	--data-urlencode "metadata[refundkit_item]=$REFUNDKIT_ITEM" \
	--data-urlencode "metadata[refundkit_attempt]=$REFUNDKIT_ATTEMPT"
[ "$REFUNDKIT_AMOUNT" = 0 ] || set -- "$@" --data-urlencode "amount=$REFUNDKIT_AMOUNT"
extra=$(printf '%s' "$item" | jq -r '(.reason // empty | "reason=\(.)"), (.metadata // {} | to_entries[] | "metadata[\(.key)]=\(.value)")') || exit 75
while IFS= read -r kv; do
	[ -z "$kv" ] || set -- "$@" --data-urlencode "$kv"
done <<END
$extra
END

status=$(printf 'header = "Authorization: Bearer %s"\n' "$STRIPE_API_KEY" |
	curl -sS -K - -o "$body" -w '%{http_code}' -X POST \
		-H "Idempotency-Key: $REFUNDKIT_IDEMPOTENCY_KEY" "$@" "$base/v1/refunds")
rc=$?
if [ $rc -ne 0 ]; then
	# No answer (connection refused, reset, timed out): the request may or
	# may not have reached Stripe; the same key again is safe.
	echo "curl failed ($rc): retry later" >&2
	exit 75
fi
errtype=$(jq -r '.error.type // empty' "$body" 2>/dev/null)
case $status in
200)
	jq -c '{id, amount, currency, status: (
	    if .status == "succeeded" then "succeeded"
	    elif .status == "pending" or .status == "requires_action" then "pending"
	    else "failed" end)}
	  + if .status == "failed" or .status == "canceled"
	    then {code: ("refund_" + .status), message: (.failure_reason // "")} else {} end' "$body" || exit 1
	;;
400 | 402 | 404)
	if [ "$errtype" = idempotency_error ]; then
		# Another request under this key: this item's earlier one, with
		# other parameters. It may have refunded: in doubt.
		echo "stripe: $(jq -r .error.message "$body")" >&2
		exit 1
	fi
	jq -c '{status: "failed", code: (.error.code // .error.type // "invalid_request"), message: (.error.message // "")}' "$body" || exit 1
	;;
409 | 429 | 502 | 503 | 504)
	echo "stripe answered $status: retry later" >&2
	exit 75
	;;
500)
	if [ "$errtype" = api_error ]; then
		# Stripe's own 500, saved under the key: indeterminate.
		echo "stripe answered 500: $(jq -r .error.message "$body")" >&2
		exit 1
	fi
	echo "a gateway answered 500: retry later" >&2
	exit 75
	;;
401 | 403)
	# The key refused before anything was done: the contract's exit 77
	# halts the run (the item stays in doubt, its key kept).
	echo "stripe answered $status: $(jq -r '.error.message // empty' "$body" 2>/dev/null)" >&2
	exit 77
	;;
*)
	# Anything unexpected: in doubt.
	echo "stripe answered $status: $(jq -r '.error.message // empty' "$body" 2>/dev/null)" >&2
	exit 1
	;;
esac
