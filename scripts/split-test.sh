#!/usr/bin/env bash
# Runs one Go package's tests in N processes at once: make test's way of
# shortening a package whose tests wait on servers one after another.
#
# Usage: scripts/split-test.sh DIR N [go test build flags, e.g. -race -tags demo]
#
# It builds the package's test binary once (go test -c, in DIR, with the
# flags), lists its tests and examples (-test.list), deals them out to N
# shares, the first share getting the first name, the second the second,
# and so on (the names listed in SPLIT_FIRST, in that order, are dealt
# first, so that the longest tests go to different shares), and runs the
# shares at once in DIR, each as -test.run '^(names)$'; the names listed in
# SPLIT_ALONE (tests that a busier machine starves) run after the shares,
# in one process. Every listed test
# runs in exactly one share, with its subtests; the binary's own TestMain
# runs in each process. The shares' output is printed one after another;
# it fails if any share fails, or if a name was dealt to no share.
#
# SPLIT_SKIP, if set, is each process's -test.skip (go test -skip): the
# tests it names are dealt but do not run.
#
# SPLIT_TIMEOUT is each process's -test.timeout (default 20m); SPLIT_BIN
# where the binary goes (default bin/split-<dir>.test at the repository's
# root).
set -euo pipefail

dir=$1 n=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}
bin=${SPLIT_BIN:-$root/bin/split-$(echo "$dir" | tr -c 'a-zA-Z0-9\n' '-').test}
mkdir -p "$(dirname "$bin")"
(cd "$dir" && $go test -c -o "$bin" "$@" .)

# The names: tests, examples and fuzz targets (go test runs a fuzz
# target's seed corpus); benchmarks do not run under go test.
mapfile -t names < <(cd "$dir" && "$bin" -test.list '.*' | grep -E '^(Test|Example|Fuzz)')
[ ${#names[@]} -gt 0 ] || { echo "split-test: $dir lists no tests"; exit 1; }

# The SPLIT_ALONE names (those the binary lists) run after the shares, in
# one process of their own; then the SPLIT_FIRST names, then the rest.
declare -A listed=()
for x in "${names[@]}"; do listed[$x]=1; done
order=() alone=()
declare -A taken=()
for x in ${SPLIT_ALONE:-}; do
	if [ -n "${listed[$x]:-}" ] && [ -z "${taken[$x]:-}" ]; then alone+=("$x"); taken[$x]=1; fi
done
for x in ${SPLIT_FIRST:-}; do
	if [ -n "${listed[$x]:-}" ] && [ -z "${taken[$x]:-}" ]; then order+=("$x"); taken[$x]=1; fi
done
for x in "${names[@]}"; do
	[ -n "${taken[$x]:-}" ] || { order+=("$x"); taken[$x]=1; }
done

declare -a shares=()
for i in "${!order[@]}"; do
	s=$((i % n))
	shares[$s]="${shares[$s]:+${shares[$s]}|}${order[$i]}"
done
dealt=${#alone[@]}
for s in "${!shares[@]}"; do dealt=$((dealt + $(tr '|' '\n' <<<"${shares[$s]}" | wc -l))); done
[ "$dealt" = ${#names[@]} ] || { echo "split-test: dealt $dealt of ${#names[@]} names"; exit 1; }

skip=()
[ -z "${SPLIT_SKIP:-}" ] || skip=(-test.skip "$SPLIT_SKIP")

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(date +%s)
pids=()
for s in "${!shares[@]}"; do
	(
		rc=0
		(cd "$dir" && exec "$bin" -test.count=1 -test.timeout="${SPLIT_TIMEOUT:-20m}" "${skip[@]}" -test.run "^(${shares[$s]})\$") >"$out/$s" 2>&1 || rc=$?
		echo "$rc $(($(date +%s) - start))" >"$out/$s.rc"
	) &
	pids[$s]=$!
done
status=0
for s in "${!shares[@]}"; do
	wait "${pids[$s]}" || true
	read -r rc took <"$out/$s.rc" || { rc=1 took=?; }
	echo "split-test: $dir, share $((s + 1)) of ${#shares[@]} ($(tr '|' '\n' <<<"${shares[$s]}" | wc -l) tests): exit $rc in ${took}s"
	cat "$out/$s"
	[ $rc = 0 ] || status=1
done
if [ ${#alone[@]} -gt 0 ]; then
	rc=0
	(IFS='|'; cd "$dir" && exec "$bin" -test.count=1 -test.timeout="${SPLIT_TIMEOUT:-20m}" "${skip[@]}" -test.run "^(${alone[*]})\$") >"$out/alone" 2>&1 || rc=$?
	echo "split-test: $dir, after the shares, alone: ${alone[*]}: exit $rc at $(($(date +%s) - start))s"
	cat "$out/alone"
	[ $rc = 0 ] || status=1
fi
if [ $status = 0 ]; then
	echo "ok   $dir (${#names[@]} tests in ${#shares[@]} processes) $(($(date +%s) - start))s"
else
	echo "FAIL $dir"
fi
exit $status
