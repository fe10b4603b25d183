#!/usr/bin/env bash
# chaos: run the fault matrix (scripts/chaos) over the binaries in bin/ and
# write its figures to RELIABILITY.md. make chaos builds bin/ first.
#
#   scripts/chaos.sh                 the full matrix (10-20 minutes), writes RELIABILITY.md
#   scripts/chaos.sh -quick          the short matrix; the report goes to stdout
#   scripts/chaos.sh -only kill9 -seed 7
#
# The full-disk scenario mounts a tmpfs: run as root to include it.
set -euo pipefail
cd "$(dirname "$0")/.."
out=RELIABILITY.md
for arg in "$@"; do
	case $arg in
	-quick | --quick | -only* | --only*) out=- ;; # partial figures never replace the report
	esac
done
exec go run ./scripts/chaos -bin bin -out "$out" -command "make chaos${*:+ CHAOSFLAGS='$*'}" "$@"
