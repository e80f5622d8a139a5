#!/bin/bash
# Side by side: run one benchmark alternately in this checkout (new) and in OLD_DIR (old), ROUNDS times each:
#
#     bench/ab.sh OLD_DIR ROUNDS NAME [ARGS...]      e.g. bench/ab.sh ../baseline 2 ttft --n 60
#
# OLD_DIR is another checkout of Conduit with its own .venv (`python3 bootstrap.py` there); each run uses the
# checkout's own interpreter from its own directory. Runs alternate (new, old, new, old, ...) so a shared,
# noisy machine loads both sides alike. Each run's full output goes to $OUT/NAME.newN.out / NAME.oldN.out
# (OUT defaults to /tmp/bench-ab) and the start and end of each run, with the load average, to $OUT/log.
# docs/benchmarks.md is put back in both checkouts after each run (the benches rewrite their section).
set -u
OLD=$(cd "$1" && pwd); ROUNDS=$2; NAME=$3; shift 3
NEW=$(cd "$(dirname "$0")/.." && pwd); OUT=${OUT:-/tmp/bench-ab}
mkdir -p "$OUT"
run() {  # label dir bench-args...
  local label=$1 dir=$2 saved; shift 2
  saved=$(mktemp); cp "$dir/docs/benchmarks.md" "$saved"
  echo "== $label $NAME $* start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/log"
  (cd "$dir" && .venv/bin/python -m "bench.$NAME" "$@" > "$OUT/$NAME.$label.out" 2>&1; echo "rc=$?" >> "$OUT/$NAME.$label.out")
  echo "== $label $NAME end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/log"
  cp "$saved" "$dir/docs/benchmarks.md"; rm -f "$saved"
}
for r in $(seq 1 "$ROUNDS"); do
  run "new$r" "$NEW" "$@"
  run "old$r" "$OLD" "$@"
done
grep -h "" "$OUT/log" | tail -n $((4 * ROUNDS))
