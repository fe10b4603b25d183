#!/usr/bin/env bash
# bench: measure refundkit's binaries on big generated inputs, each beside
# its baselines and the old core, run in turn, and write the table to
# BENCHMARKS.md.
#
#   make bench        (builds bin/ first, then runs this; about 50 minutes,
#                     the NATS rows 17 of them)
#
# It installs what it compares against (jq) and GNU time when missing,
# builds scripts/gen and scripts/bench, builds the old core's binaries from
# a git worktree of BENCH_BASE in the temp dir (the work tree is not
# touched), generates every input into the temp dir, starts and stops a
# simulator per run, and removes everything on exit. The measuring is done
# by scripts/bench (see its doc comment); this script prepares for it.
#
# Environment:
#   BENCH_OUT        the report (default BENCHMARKS.md; for a quick run
#                    $TMPDIR/BENCHMARKS-quick.md)
#   BENCH_ITEMS      items of the big inputs (default 1000000); fewer is a
#                    quick run: BENCH_ITEMS=100000 for development
#   BENCH_ROUNDS     rounds of each side in the fast rows (default 5)
#   BENCH_QUICK=1    small inputs and few runs in every row, to try the script
#   BENCH_BASE       the old core's revision (default 87c9614, the commit
#                    before issue 11); none: no old core
#   BENCH_ONLY       rows to run, comma-separated: restart,audit,restart-compact,
#                    audit-compact,refund,rate,lookup,pacing,adyen,adyen-settle,
#                    adyen-webhook (bin/adyen-webhook too; its fsyncs counted
#                    with perf stat when perf can), stripe-settle,stripe-webhook
#                    (bin/webhook too: pending Stripe refunds settled from
#                    the receiver's events against polling, and the
#                    receiver's events kept per second and fsyncs per
#                    event), merge,plan,
#                    pg-workers,pg-claim (a throwaway PostgreSQL server, fsync on),
#                    nats-workers,nats-claim (a fresh nats-server per run,
#                    sync_interval: always; nats-workers runs PostgreSQL's
#                    and the file journal's sides in the same rounds),
#                    budget (workers on one PostgreSQL checkpoint splitting
#                    the simulator's test-mode limits; about 12 minutes)
#   BENCH_MAX_LOAD   wait until the 1-minute load is at most this (default 1.5)
#   BENCH_LOAD_WAIT  but at most this long (default 15m), then measure anyway
#   BENCH_BIN        the binaries to measure (default bin)
#   NATS_SERVER_BIN  the nats-server of the NATS rows (default
#                    bin/tools/nats-server, installed as make tools does
#                    when missing: it needs the Go module proxy)
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BENCH_BIN:-bin}
BASE=${BENCH_BASE:-87c9614}
# A fake test-mode key: the simulator accepts any sk_test_ key, and real
# Stripe never sees this one.
export STRIPE_API_KEY=sk_test_refundkit_bench_not_a_real_key

die() { echo "bench: $*" >&2; exit 2; }

for b in plan refund stripe-sim webhook; do
	[[ -x $BIN/$b ]] || die "$BIN/$b is missing: run make build (or make bench)"
done

# install_pkg PKG installs a Debian package, through sudo when not root.
install_pkg() {
	local sudo=()
	if [[ $(id -u) != 0 ]]; then
		command -v sudo >/dev/null || die "$1 is missing and this is not root: install the package $1"
		sudo=(sudo)
	fi
	echo "bench: installing $1 (apt-get)" >&2
	"${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq "$1" >/dev/null ||
		die "could not install $1: install it and run again"
}
command -v jq >/dev/null || install_pkg jq
[[ -x /usr/bin/time ]] || install_pkg time # GNU time: each command's peak RSS
for t in sort uniq comm cut grep wc df bash; do
	command -v "$t" >/dev/null || die "$t is missing (coreutils)"
done
# The NATS rows' nats-server: the one make tools installs, pinned in the
# Makefile, unless NATS_SERVER_BIN names another.
if [[ -z ${BENCH_ONLY:-} || ,$BENCH_ONLY, == *,nats-* ]]; then
	tools_nats=$(pwd -P)/bin/tools/nats-server
	export NATS_SERVER_BIN=${NATS_SERVER_BIN:-$tools_nats}
	if [[ ! -x $NATS_SERVER_BIN ]]; then
		[[ $NATS_SERVER_BIN == "$tools_nats" ]] || die "NATS_SERVER_BIN=$NATS_SERVER_BIN is not an executable"
		echo "bench: installing nats-server (make tools)" >&2
		make --no-print-directory "$tools_nats" >&2 || die "could not install nats-server: name one with NATS_SERVER_BIN=/path/to/nats-server"
	fi
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/refundkit-bench.XXXXXX")
pid=""
cleanup() {
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true # it stops its own runs and simulators
		wait "$pid" 2>/dev/null || true
	fi
	if [[ -d $WORK/base ]]; then
		git worktree remove --force "$WORK/base" 2>/dev/null || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir "$WORK/tools" "$WORK/bin"
go build -o "$WORK/tools/" ./scripts/gen ./scripts/bench
# A copy of the binaries: a rebuild of bin/ during the session does not mix
# two versions into one table.
for f in "$BIN"/*; do
	if [[ -f $f && -x $f ]]; then cp -p "$f" "$WORK/bin/"; fi
done

args=(-bin "$WORK/bin" -gen "$WORK/tools/gen" -work "$WORK"
	-max-load "${BENCH_MAX_LOAD:-1.5}" -load-wait "${BENCH_LOAD_WAIT:-15m}")

# The old core: its binaries built from a worktree of BENCH_BASE in the
# temp dir, removed again once built.
if [[ $BASE != none ]]; then
	rev=$(git rev-parse --short "$BASE^{commit}") || die "BENCH_BASE $BASE: not a commit of this repository"
	echo "bench: building the old core at $rev" >&2
	git worktree add --detach -q "$WORK/base" "$rev"
	(cd "$WORK/base" && go build -o "$WORK/base-bin/" ./cmd/...)
	git worktree remove --force "$WORK/base"
	args+=(-base-bin "$WORK/base-bin" -base-rev "$rev")
fi

quick=""
cmd="make bench"
[[ -z ${BENCH_ITEMS:-} ]] || { args+=(-items "$BENCH_ITEMS"); cmd="BENCH_ITEMS=$BENCH_ITEMS $cmd"; }
[[ -z ${BENCH_ROUNDS:-} ]] || { args+=(-rounds "$BENCH_ROUNDS"); cmd="BENCH_ROUNDS=$BENCH_ROUNDS $cmd"; }
[[ $BASE == 87c9614 ]] || cmd="BENCH_BASE=$BASE $cmd"
if [[ ${BENCH_QUICK:-} == 1 ]]; then
	args+=(-quick)
	cmd="BENCH_QUICK=1 $cmd"
	quick=1
fi
[[ -z ${BENCH_ITEMS:-} || $BENCH_ITEMS == 1000000 ]] || quick=1
if [[ -n $quick ]]; then
	args+=(-out "${BENCH_OUT:-${TMPDIR:-/tmp}/BENCHMARKS-quick.md}")
else
	args+=(-out "${BENCH_OUT:-BENCHMARKS.md}")
fi
args+=(-command "$cmd")
[[ -z ${BENCH_ONLY:-} ]] || args+=(-only "$BENCH_ONLY")

# In the background, so that a signal to this script reaches the trap at
# once and is passed on by cleanup.
"$WORK/tools/bench" "${args[@]}" &
pid=$!
status=0
wait "$pid" || status=$?
pid=""
exit "$status"
