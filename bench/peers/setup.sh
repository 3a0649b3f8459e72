#!/usr/bin/env bash
# Set up the side-by-side bench: a venv with the pinned peers and this checkout's jobledger, and
# the PostgreSQL role/database/schemas the drivers use.
#
#   bash bench/peers/setup.sh                 # venv at bench/peers/.venv + database
#   bash bench/peers/setup.sh --reset         # also drop and re-create both bench schemas
#   bash bench/peers/setup.sh --no-profile    # skip py-spy
#
# Needs: python3 (3.11+), PostgreSQL on 127.0.0.1:5432 with user postgres and trust auth
# (override with PEERSBENCH_PG / PEERSBENCH_PG_ADMIN, see peerscommon.py).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${PEERSBENCH_VENV:-$here/.venv}"
python="${PYTHON:-python3}"

reset=()
profile=1
for arg in "$@"; do
  case "$arg" in
    --reset) reset=(--reset) ;;
    --no-profile) profile=0 ;;
    *) echo "unknown option: $arg" >&2; exit 2 ;;
  esac
done

if [ ! -x "$venv/bin/python" ]; then
  echo "== creating $venv"
  "$python" -m venv "$venv"
fi
echo "== installing the pinned peers (requirements.txt) and jobledger from $repo"
# One resolution, so jobledger's [postgres] extra cannot move the pinned psycopg.
"$venv/bin/pip" install --quiet --disable-pip-version-check \
  -r "$here/requirements.txt" -e "$repo[postgres]"
if [ "$profile" = 1 ]; then
  echo "== installing py-spy (optional)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements-profile.txt" \
    || echo "   py-spy could not be installed; profiling (--pyspy) will not work" >&2
fi

echo "== PostgreSQL: role, database, schemas"
(cd "$here" && "$venv/bin/python" setup_db.py "${reset[@]}")

echo "== installed"
"$venv/bin/python" - <<'PY'
from importlib import metadata
for name in ("huey", "procrastinate", "psycopg", "psycopg-binary", "psycopg-pool", "jobledger", "py-spy"):
    try:
        print(f"   {name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        print(f"   {name} (not installed)")
PY
if ! "$venv/bin/jobledger" worker --help >/dev/null 2>&1; then
  echo "warning: '$venv/bin/jobledger worker --help' fails: this checkout's jobledger does not" \
       "import right now (the bench needs it; the peers and the database are set up)" >&2
fi
echo "== ready: $venv/bin/python $here/run.py --help"
