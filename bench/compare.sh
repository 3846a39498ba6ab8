#!/bin/sh
# bench/compare.sh: `make bench-compare`. Runs the microbenchmarks (-benchmem) of a base revision
# and of the working tree, interleaved run by run so that both see the same machine load, and
# compares them with benchstat.
#
# Environment (the Makefile passes these):
#   BENCH_BASE   git revision to compare against (default HEAD); read with `git archive`, so the
#                working tree and the repository are never touched
#   BENCH_COUNT  runs of each side (default 6; benchstat wants at least 6 for confidence intervals)
#   BENCH        benchmark regexp (default .)
#   BENCH_PKGS   package patterns (default the hot paths)
#   BENCHSTAT    benchstat binary (default the one pinned in go.mod, run through `go tool`)
#   GO           go command (default go)
#
# A package that the base revision does not have is measured on the working tree only (benchstat
# shows it without a comparison).
set -eu

GO=${GO:-go}
base=${BENCH_BASE:-HEAD}
count=${BENCH_COUNT:-6}
pattern=${BENCH:-.}
pkgs=${BENCH_PKGS:-"./accumulator/ ./rehydrate/ ./upstream/ ./store/..."}
# `go tool -n` builds the pinned benchstat (cached) and prints its path: the comparison at the end
# runs in a temporary folder, outside the module, where `go tool` cannot find the go.mod.
benchstat=${BENCHSTAT:-$($GO tool -n benchstat)}

root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/base" "$tmp/bin/base" "$tmp/bin/head"
git archive --format=tar "$base" | tar -x -C "$tmp/base"
rev=$(git rev-parse --short "$base")

# build TREE SIDE: compile one test binary per package with tests; print "dir binary" lines.
build() {
	tree=$1 side=$2
	# shellcheck disable=SC2086 # pkgs is a list of patterns
	(cd "$tree" && $GO list -e -f '{{if .TestGoFiles}}{{.Dir}} {{.ImportPath}}{{end}}' $pkgs 2>/dev/null) |
		while read -r dir ip; do
			[ -n "$dir" ] || continue
			bin="$tmp/bin/$side/$(echo "$ip" | tr / _).test"
			if (cd "$tree" && $GO test -c -o "$bin" "$ip" >/dev/null 2>&1); then
				echo "$dir $bin"
			else
				echo "benchrun compare: $side: $ip does not build; skipped" >&2
			fi
		done
}

echo "building the test binaries of $base ($rev) and of the working tree"
build "$tmp/base" base >"$tmp/base.list"
build "$root" head >"$tmp/head.list"

# run LIST OUT: one run of every binary, from its package folder (testdata paths are relative).
run() {
	while read -r dir bin; do
		(cd "$dir" && "$bin" -test.run '^$' -test.bench "$pattern" -test.benchmem -test.count 1) >>"$2" 2>/dev/null || true
	done <"$1"
}

: >"$tmp/$rev.txt"
: >"$tmp/working-tree.txt"
i=1
while [ "$i" -le "$count" ]; do
	echo "run $i of $count"
	run "$tmp/base.list" "$tmp/$rev.txt"
	run "$tmp/head.list" "$tmp/working-tree.txt"
	i=$((i + 1))
done

cd "$tmp" && "$benchstat" "$rev.txt" working-tree.txt
