#!/usr/bin/env bash
# Runs CI (.ci/run, which calls `make test`) on fresh clean clones of this
# repository N times in a row while a CPU hog (stress-ng --cpu 2) runs
# beside it, and reports each run's time and result. The suite must pass
# every run: a flaky test hides on a quiet machine and shows here.
#
#   scripts/loaded-ci.sh [N] [COMMIT]     (default 5, HEAD)
#
# Installs stress-ng through apt when it is missing (run as root, as CI
# does). Logs go to $LOADED_CI_DIR (default /tmp/loaded-ci).
set -euo pipefail
n=${1:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$repo" rev-parse "${2:-HEAD}")
out=${LOADED_CI_DIR:-/tmp/loaded-ci}
mkdir -p "$out"
if ! command -v stress-ng >/dev/null 2>&1; then
	apt-get update -qq && apt-get install -y -qq stress-ng
fi
echo "loaded CI: $n clean-clone runs of ${commit:0:12} beside stress-ng --cpu 2; logs in $out"
pass=0
for i in $(seq 1 "$n"); do
	dir=$(mktemp -d /tmp/loaded-ci-clone.XXXXXX)
	git clone -q "$repo" "$dir/roomlog"
	git -C "$dir/roomlog" checkout -q "$commit"
	stress-ng --cpu 2 --timeout 0 --quiet &
	hog=$!
	start=$(date +%s)
	set +e
	(cd "$dir/roomlog" && CI=true .ci/run) >"$out/run-$i.log" 2>&1
	rc=$?
	set -e
	secs=$(($(date +%s) - start))
	kill "$hog" 2>/dev/null || true
	wait "$hog" 2>/dev/null || true
	rm -rf "$dir"
	if [ "$rc" -eq 0 ]; then
		pass=$((pass + 1))
		echo "run $i: PASS in ${secs}s"
	else
		echo "run $i: FAIL (exit $rc) after ${secs}s; failures:"
		grep -E '^(--- FAIL|FAIL|panic:)' "$out/run-$i.log" | head -20 || true
	fi
done
echo "loaded CI: $pass of $n runs passed"
[ "$pass" -eq "$n" ]
