#!/usr/bin/env bash
# Stop the one-node Slurm cluster that scripts/slurm-up.sh started (daemons by their pid files).
#   --daemons-only   leave munged running
set -u
STATE=${COMMBENCH_SLURM_DIR:-/tmp/commbench-slurm}
stop() {  # pid file
    [ -s "$1" ] || return 0
    pid=$(cat "$1")
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
}
stop "$STATE/run/slurmd.pid"
stop "$STATE/run/slurmctld.pid"
if [ "${1:-}" != "--daemons-only" ]; then
    stop /run/munge/munged.pid
fi
exit 0
