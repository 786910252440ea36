#!/usr/bin/env bash
# Install what the tests need and run the whole suite: lint, types, unit, integration,
# SQLite and PostgreSQL, the dashboard in a browser, the engines against a real Slurm, Ray
# and Docker. Debian packages (tmux, screen, postgresql, chromium, Slurm and munge,
# docker.io, busybox-static and libfaketime) come from apt; a private PostgreSQL server runs
# in a temp dir for the length of the run and is stopped after; the engines' tests start and stop
# their own private slurmctld/slurmd/munged, Ray head and node, and dockerd.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
need=()
command -v tmux >/dev/null || need+=(tmux)
command -v screen >/dev/null || need+=(screen)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
  && command -v munged >/dev/null || need+=(slurmctld slurmd slurm-client munge)
[ -x /usr/sbin/dockerd ] && [ -x /usr/bin/docker ] || need+=(docker.io)
[ -x /bin/busybox ] || need+=(busybox-static)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || need+=(libfaketime)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# the CPU build of torch first, pinned by its local version (+cpu): a bare `torch` (or the ml
# extra's range) pulls a multi-GB CUDA build. pip finds torch-2.13.0+cpu through the configured
# find-links; where only the public index is there, the same wheel comes from PyTorch's CPU index.
.venv/bin/python -m pip install -q 'torch==2.13.0+cpu' \
  || .venv/bin/python -m pip install -q 'torch==2.13.0+cpu' --index-url https://download.pytorch.org/whl/cpu
.venv/bin/python -m pip install -q -e '.[test,ml,trackers]'

# --- a private PostgreSQL server ------------------------------------------------------
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PGDIR=$(mktemp -d /tmp/rota-pg.XXXXXX)
PGPORT=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
run_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if [ "$(id -u)" = 0 ]; then chown postgres "$PGDIR"; fi
run_pg "$PGBIN/initdb" -D "$PGDIR/data" -A trust -U rota >/dev/null
run_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/log" -w -o "-k $PGDIR -p $PGPORT -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
stop_pg() { run_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" -m fast stop >/dev/null 2>&1 || true; rm -rf "$PGDIR"; }
trap stop_pg EXIT
export ROTA_TEST_PG_URL="postgresql://rota@127.0.0.1:$PGPORT/postgres"
export ROTA_REQUIRE_PG=1
export ROTA_REQUIRE_BROWSER=1  # tests/ui fail, not skip, without /usr/bin/chromium
export ROTA_REQUIRE_TORCH=1    # the training templates' tests fail, not skip, without torch
export ROTA_REQUIRE_SLURM=1    # tests/backends/slurm fail, not skip, without a private Slurm
export ROTA_REQUIRE_DOCKER=1   # tests/backends/container: a private dockerd, Debian's docker.io
export ROTA_REQUIRE_RAY=1      # tests/backends/ray: a local Ray head and a second node
export ROTA_REQUIRE_FAKETIME=1 # a quota's reset at midnight: the daemon's clock moved
export ROTA_REQUIRE_ROOT=1     # tests/integration/test_multi_user.py: real Unix accounts (CI runs as root)

.venv/bin/ruff check src tests bench
.venv/bin/mypy
.venv/bin/lint-imports  # no import circle (pyproject.toml's [tool.importlinter])
set +e
# in 3 workers: the suite mostly waits (on daemons, jobs, engines), using under half of 2
# cores in one process. Tests sharing the machine's engines or Unix accounts keep to one
# worker (tests/conftest.py's groups). Then the few tests marked serial, alone. The slowest
# 30 printed: the CI budget is 45 min.
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${ROTA_TEST_WORKERS:-3}" -m "not serial" \
  --durations=30 "$@"
rc=$?
.venv/bin/python -m pytest -q -p no:cacheprovider -m serial --durations=5 "$@"
rc_serial=$?
set -e
# exit code 5 is "no tests collected": a failure when neither run found any
if [ $rc -eq 5 ] && [ $rc_serial -eq 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2; exit 1
fi
[ $rc -eq 5 ] && rc=0
[ $rc_serial -eq 5 ] && rc_serial=0
[ $rc -ne 0 ] && exit $rc
exit $rc_serial
