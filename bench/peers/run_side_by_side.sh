#!/usr/bin/env bash
# The one command: every system's enqueue, batch enqueue and burn-downs (C = 1, 4, 8),
# interleaved, 3 runs, then the jobledger kill checks; one JSON line per measurement.
#
#   bash bench/peers/run_side_by_side.sh                                   # the full measurement
#   bash bench/peers/run_side_by_side.sh --n 300 --runs 1 --no-wait --killtests 0   # smoke test
#   bash bench/peers/run_side_by_side.sh --help                             # every option
#
# Then: bench/peers/.venv/bin/python bench/peers/summarize.py
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${PEERSBENCH_VENV:-$here/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "no venv at $venv: run bash bench/peers/setup.sh first" >&2
  exit 2
fi
cd "$here"
exec "$venv/bin/python" run.py --python "$venv/bin/python" "$@"
