#!/usr/bin/env bash
# A Slurm cluster over simulated hosts (scripts/sim-hosts.sh), to try multi-node `srun` launches
# on one machine: slurmctld and a slurmd on host 1, a slurmd on every other host, and a munged of
# its own. Everything it uses (slurm.conf, munge socket, state, logs, pid files) lies under
# $COMMBENCH_HOSTS_DIR/NAME/slurm (default /tmp/commbench-hosts), so it never touches
# /etc/slurm or a cluster this machine already runs. Needs root.
#
#   scripts/sim-slurm.sh up NAME     a node per host of NAME (already up), 4 CPUs each
#   scripts/sim-slurm.sh down NAME   stop its daemons (by their pid files), remove its state
#
# Commands reach it with SLURM_CONF=$COMMBENCH_HOSTS_DIR/NAME/slurm/slurm.conf, run inside a
# host: SLURM_CONF=... scripts/sim-hosts.sh run NAME 1 srun -N 2 --ntasks-per-node=2 hostname
# (`-N 2 -n 4` alone may place 3 tasks on one node and 1 on the other: each node has 4 CPUs).
set -u
here=$(cd "$(dirname "$0")" && pwd)
SIM=$here/sim-hosts.sh
STATE_ROOT=${COMMBENCH_HOSTS_DIR:-/tmp/commbench-hosts}
CPUS=${CPUS:-4}
# Each host is a network namespace of its own, so these ports collide with nothing outside it;
# they differ from Slurm's defaults (6817, 6818) only to tell the two apart in logs.
CTLD_PORT=6917
SLURMD_PORT=6918

usage() {
    sed -n '8,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

check_name() {
    [[ $1 =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "sim-slurm: NAME must be 1-8 lowercase letters and digits, starting with a letter: $1" >&2; exit 2; }
}

# live PIDFILE COMM: the pid the file names, if that process is still COMM (not gone, not reused).
live() {
    local pid
    [ -s "$1" ] || return 0
    pid=$(cat "$1" 2>/dev/null)
    [[ $pid =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"
    return 0
}

# running PID: the process is there and not a zombie (one waiting for its parent to reap it).
running() {
    local state
    state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)
    [ -n "$state" ] && [ "$state" != Z ]
}

# Stop the daemons of the cluster in STATE all at once (each takes a second or two to end):
# SIGTERM, then SIGKILL to any still there after 5 s.
stop_daemons() {
    local dir=$1 file pids=() pid left
    for file in "$dir"/run/slurmd-*.pid; do
        pids+=($(live "$file" slurmd))
    done
    pids+=($(live "$dir/run/slurmctld.pid" slurmctld) $(live "$dir/munge/munged.pid" munged-sim))
    [ ${#pids[@]} -gt 0 ] || return 0
    kill "${pids[@]}" 2>/dev/null
    for _ in $(seq 1 50); do
        left=()
        for pid in "${pids[@]}"; do running "$pid" && left+=("$pid"); done
        [ ${#left[@]} -gt 0 ] || return 0
        sleep 0.1
    done
    kill -9 "${left[@]}" 2>/dev/null
    return 0
}

down() {
    local name=$1 dir=$STATE_ROOT/$1/slurm
    check_name "$name"
    [ -d "$dir" ] || return 0
    stop_daemons "$dir"
    rm -rf "$dir"
    return 0
}

# failed STATE: stop what started; keep the logs for a look (`down` removes them).
failed() {
    echo "sim-slurm: $2; stopping it; logs in $1/log and $1/munge (scripts/sim-slurm.sh down removes them)" >&2
    stop_daemons "$1"
    exit 1
}

up() {
    local name=$1 hosts=$STATE_ROOT/$1 dir=$STATE_ROOT/$1/slurm count subnet i state
    check_name "$name"
    if [ "$(id -u)" != 0 ]; then
        echo "sim-slurm: needs root (it installs packages and starts daemons)" >&2
        exit 1
    fi
    [ -f "$hosts/layout" ] || { echo "sim-slurm: hosts $name are not up (scripts/sim-hosts.sh up $name N)" >&2; exit 1; }
    read -r count subnet _ < "$hosts/layout"
    if [ -e "$dir" ]; then echo "sim-slurm: a cluster on $name is already up ($dir; scripts/sim-slurm.sh down $name stops it)" >&2; exit 1; fi
    if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
            || ! command -v srun >/dev/null || ! command -v munged >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends munge slurmctld slurmd slurm-client >/dev/null
    fi
    if [ ! -s /etc/munge/munge.key ]; then
        mkdir -p /etc/munge
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chown munge:munge /etc/munge /etc/munge/munge.key
        chmod 400 /etc/munge/munge.key
    fi

    trap 'failed "$dir" "starting the cluster on $name failed"' ERR
    set -e
    mkdir -p "$dir"/ctld "$dir"/log "$dir"/run "$dir"/munge
    chown munge:munge "$dir"/munge
    chmod 755 "$dir"/munge
    local conf=$dir/slurm.conf socket=$dir/munge/munge.socket
    {
        cat <<CONF
ClusterName=$name
SlurmctldHost=${name}1($subnet.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/d-%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
CONF
        for i in $(seq 1 "$count"); do
            mkdir -p "$dir/d-$name$i"
            echo "NodeName=$name$i NodeAddr=$subnet.$i CPUs=$CPUS State=UNKNOWN"
        done
        echo "PartitionName=sim Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
    } > "$conf"

    # A munged of its own, on its own socket, in host 1 (so that sim-hosts.sh down ends it too).
    # Started through a link named munged-sim: scripts/slurm-up.sh takes any process named
    # exactly "munged" for this machine's own and would then not start that one.
    ln -s /usr/sbin/munged "$dir/munge/munged-sim"
    "$SIM" run "$name" 1 runuser -u munge -- "$dir/munge/munged-sim" --socket="$socket" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
        --seed-file="$dir/munge/munged.seed"
    export SLURM_CONF=$conf
    "$SIM" run "$name" 1 slurmctld
    for i in $(seq 1 "$count"); do
        "$SIM" run "$name" "$i" slurmd  # its NodeName is its host's name
    done
    set +e
    trap - ERR

    for _ in $(seq 1 150); do
        state=$("$SIM" run "$name" 1 sinfo -h -N -o %T 2>/dev/null)
        if [ "$(grep -c '^idle' <<<"$state")" = "$count" ]; then
            echo "sim-slurm: $count node(s) idle: $(seq -f "$name%g" -s ' ' 1 "$count") ($CPUS CPUs each)"
            echo "sim-slurm: try: SLURM_CONF=$conf $SIM run $name 1 srun -N $count --ntasks-per-node=2 hostname"
            return 0
        fi
        sleep 0.1
    done
    failed "$dir" "the nodes did not all come up (sinfo: $(echo $state))"
}

case "${1:-}" in
up) [ $# -eq 2 ] || usage; up "$2" ;;
down) [ $# -eq 2 ] || usage; down "$2" ;;
*) usage ;;
esac
