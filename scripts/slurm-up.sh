#!/usr/bin/env bash
# Start a one-node Slurm cluster on this host, without systemd, to try `srun` launches.
# Needs root and Debian/Ubuntu packages (installed here when missing: munge, slurmctld,
# slurmd, slurm-client). Stop it with scripts/slurm-down.sh.
#   CPUS=4 scripts/slurm-up.sh      # how many task slots the node offers (default 4)
set -euo pipefail

STATE=${COMMBENCH_SLURM_DIR:-/tmp/commbench-slurm}
CPUS=${CPUS:-4}
HOST=$(hostname -s)

if [ "$(id -u)" != 0 ]; then
    echo "slurm-up: needs root (it installs packages and starts daemons)" >&2
    exit 1
fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
        || ! command -v srun >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends munge slurmctld slurmd slurm-client >/dev/null
fi

mkdir -p "$STATE"/spool/ctld "$STATE"/spool/d "$STATE"/log "$STATE"/run /etc/slurm /run/munge
chown munge:munge /run/munge /etc/munge
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 400 /etc/munge/munge.key
if ! pgrep -x munged >/dev/null; then
    runuser -u munge -- /usr/sbin/munged
fi

cat > /etc/slurm/slurm.conf <<CONF
ClusterName=commbench
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
TopologyPlugin=topology/tree
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
# One leaf switch with the node behind it, under a spine: `scontrol show topology` then answers
# as a cluster with a tree topology does (doctor.py reads it under srun).
cat > /etc/slurm/topology.conf <<CONF
SwitchName=leaf1 Nodes=$HOST
SwitchName=spine Switches=leaf1
CONF

"$(dirname "$0")/slurm-down.sh" --daemons-only >/dev/null 2>&1 || true
slurmctld
slurmd
for _ in $(seq 1 60); do
    state=$(sinfo -h -N -o %T 2>/dev/null | head -n 1 || true)
    case "$state" in
        idle*|mixed*|allocated*) echo "slurm-up: node $HOST is $state ($CPUS CPUs); try: srun -n 2 hostname"; exit 0 ;;
        down*|drain*) scontrol update nodename="$HOST" state=resume 2>/dev/null || true ;;
    esac
    sleep 0.5
done
echo "slurm-up: the node did not come up; see $STATE/log/" >&2
exit 1
