#!/usr/bin/env bash
# Resident memory of a running `pgsweep run`, sampled with ps while it runs
# passes against DATABASE_URL (docs/benchmarks.md, "runner").
#
#   DATABASE_URL=postgres://... scripts/runner-rss.sh [seconds=300] [interval=100ms]
set -euo pipefail
url=${DATABASE_URL:?set DATABASE_URL}
secs=${1:-300}
interval=${2:-100ms}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(mktemp -d)/pgsweep
(cd "$root" && go build -o "$bin" ./cmd/pgsweep)
"$bin" migrate --database-url "$url" >/dev/null
addr=127.0.0.1:19190
"$bin" run --database-url "$url" --owner rss-probe --interval "$interval" --jitter=-1s --http-addr "$addr" 2>/dev/null &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
step=$(( secs / 10 ))
for i in $(seq 1 10); do
	sleep "$step"
	m=$(curl -s "http://$addr/metrics")
	printf 't=%4ss  rss=%6s kB  passes=%6s  go_heap_inuse=%s\n' $((i * step)) "$(ps -o rss= -p $pid | tr -d ' ')" \
		"$(awk '/^pgsweep_maintain_passes_total/ {print $2}' <<<"$m")" "$(awk '/^go_memstats_heap_inuse_bytes/ {print $2}' <<<"$m")"
done
