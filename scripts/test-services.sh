#!/usr/bin/env bash
# What the launcher tests need beyond the venv (which has MPICH's mpirun from PyPI):
# Debian's Open MPI (mpirun.openmpi, outside the venv so it never shadows MPICH's mpirun),
# pdsh (deepspeed --hostfile's launcher), a one-node Slurm cluster, Debian's Chromium
# (report.py html's pages opened in a real browser) and Debian's PostgreSQL (tests/test_db.py
# starts a server of its own from it, on a free port, as the postgres user), libfaketime (hosts
# whose clocks disagree, tests/test_trials.py). Needs root;
# without it, says what the tests will skip.
#   scripts/test-services.sh up     install what is missing, start Slurm, remove the simulated
#                                   hosts a killed run left (scripts/sim-hosts.sh sweep)
#   scripts/test-services.sh down   stop the Slurm daemons that `up` started
set -u
here=$(cd "$(dirname "$0")" && pwd)
STATE=${COMMBENCH_SLURM_DIR:-/tmp/commbench-slurm}

case "${1:-}" in
up)
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "test-services: not root or no apt-get: Open MPI and srun tests will be skipped" >&2
        exit 0
    fi
    # simulated hosts a killed run left (their names are random: nothing else removes them)
    "$here/sim-hosts.sh" sweep
    if [ ! -x /usr/bin/mpirun.openmpi ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends openmpi-bin >/dev/null \
            || echo "test-services: could not install openmpi-bin" >&2
    fi
    if ! command -v pdsh >/dev/null; then  # deepspeed --hostfile's launcher (tests/test_many_hosts_mpi.py)
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends pdsh >/dev/null \
            || echo "test-services: could not install pdsh" >&2
    fi
    if ! command -v chromium >/dev/null; then  # tests/test_report_html.py, headless
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null \
            || echo "test-services: could not install chromium" >&2
    fi
    if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then  # tests/test_db.py starts its own server
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql >/dev/null \
            || echo "test-services: could not install postgresql" >&2
    fi
    if ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; then
        # tests/test_trials.py: simulated hosts whose clocks disagree (libfaketime)
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends faketime >/dev/null \
            || echo "test-services: could not install faketime" >&2
    fi
    if [ -f /etc/slurm/slurm.conf ] && ! grep -q '^ClusterName=commbench$' /etc/slurm/slurm.conf; then
        echo "test-services: a Slurm configuration of this host's own exists; using it as it is" >&2
        exit 0
    fi
    if sinfo -h >/dev/null 2>&1; then
        exit 0  # already up
    fi
    "$here/slurm-up.sh" && touch "$STATE/started-by-tests"
    ;;
down)
    if [ -f "$STATE/started-by-tests" ]; then
        "$here/slurm-down.sh"
        rm -f "$STATE/started-by-tests"
    fi
    ;;
*)
    echo "usage: $0 up|down" >&2
    exit 2
    ;;
esac
