#!/usr/bin/env bash
# Simulated hosts on one machine, for trying multi-node launches (and for the tests that do):
# network namespaces on a bridge of their own, each with its own address, host name and
# /etc/hosts naming every host. The bridges, switches and the hosts' ends of their links live in
# one more namespace, NAMEnet (the fabric), so that nothing appears or vanishes among this
# machine's own interfaces (libfabric, under oneCCL, lists them as it starts). Needs root
# (CAP_NET_ADMIN, CAP_SYS_ADMIN).
#
#   scripts/sim-hosts.sh up NAME N [SUBNET] [PER_SWITCH]
#                                             hosts NAME1 .. NAMEN at SUBNET.1 .. SUBNET.N
#                                             (SUBNET: three octets, default 10.77.0); with
#                                             PER_SWITCH, switches of that many hosts each
#                                             (their own bridge), joined to a spine bridge
#                                             by one link each: the switch's uplink
#   scripts/sim-hosts.sh run NAME I CMD ...   run CMD "on" host I: its network, its host name,
#                                             its hosts file (as ssh into it would, minus ssh)
#   scripts/sim-hosts.sh down NAME            kill what runs in the hosts, remove them
#   scripts/sim-hosts.sh slow NAME I RATE     host I's link, both ways, at RATE (200mbit, 1gbit)
#   scripts/sim-hosts.sh slow-link NAME I J RATE   only the link between hosts I and J
#   scripts/sim-hosts.sh slow-uplink NAME K RATE   switch K's uplink, both ways (all its
#                                             hosts' traffic to the other switches shares it)
#   scripts/sim-hosts.sh topology NAME        the switches as Slurm's topology.conf (--topology)
#   scripts/sim-hosts.sh sweep [MINUTES]      remove what killed runs left: every set brought
#                                             up over MINUTES ago (default 30) in which no
#                                             process runs (make test does, as it starts)
#
# NAME: up to 8 letters and digits (interface names are short); make it unique per use.
# Traffic stays between the hosts on their bridge; nothing is routed anywhere else.
set -u
STATE_ROOT=${COMMBENCH_HOSTS_DIR:-/tmp/commbench-hosts}

usage() {
    sed -n '9,25p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

check_name() {
    [[ $1 =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "sim-hosts: NAME must be 1-8 lowercase letters and digits, starting with a letter: $1" >&2; exit 2; }
}

up() {
    local name=$1 count=$2 subnet=${3:-10.77.0} per=${4:-0} dir=$STATE_ROOT/$1 i k switches=0
    check_name "$name"
    [[ $count =~ ^[1-9][0-9]?$ ]] || { echo "sim-hosts: N must be 1-99: $count" >&2; exit 2; }
    [[ $subnet =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || { echo "sim-hosts: SUBNET is three octets, e.g. 10.77.0: $subnet" >&2; exit 2; }
    [[ $per =~ ^[0-9]{1,2}$ ]] || { echo "sim-hosts: PER_SWITCH must be 1-99: $per" >&2; exit 2; }
    [ "$per" -gt 0 ] && switches=$(( (count + per - 1) / per ))
    if [ -e "$dir" ]; then
        # a run killed before its `down` leaves the directory; it is up only if its hosts are
        if [ -e "/run/netns/${name}1" ] || [ -e "/run/netns/${name}net" ]; then
            echo "sim-hosts: $name is already up ($dir; scripts/sim-hosts.sh down $name)" >&2
            exit 1
        fi
        echo "sim-hosts: $name: removing what a killed run left in $dir" >&2
        rm -rf "$dir"
    fi
    mkdir -p "$dir"
    {
        echo "127.0.0.1 localhost"
        echo "::1 localhost"
        for i in $(seq 1 "$count"); do
            echo "$subnet.$i $name$i"
            echo "::ffff:$subnet.$i $name$i"  # c10d looks hosts up as IPv6 too
        done
    } > "$dir/hosts"
    echo "$count $subnet $per" > "$dir/layout"
    trap 'echo "sim-hosts: setting up $name failed; removing it" >&2; down "$name"; exit 1' ERR
    set -e
    local fabric=(ip -n "${name}net")
    ip netns add "${name}net"
    "${fabric[@]}" link add "${name}br" type bridge
    "${fabric[@]}" link set "${name}br" up
    for k in $(seq 1 "$switches"); do  # a switch: its bridge, its uplink to the spine (br)
        "${fabric[@]}" link add "${name}s$k" type bridge
        "${fabric[@]}" link set "${name}s$k" up
        "${fabric[@]}" link add "${name}u$k" type veth peer name "${name}c$k"
        "${fabric[@]}" link set "${name}u$k" master "${name}s$k" up
        "${fabric[@]}" link set "${name}c$k" master "${name}br" up
    done
    for i in $(seq 1 "$count"); do
        local bridge="${name}br"
        [ "$per" -gt 0 ] && bridge="${name}s$(( (i - 1) / per + 1 ))"
        ip netns add "$name$i"
        "${fabric[@]}" link add "${name}v$i" type veth peer name eth0 netns "$name$i"
        "${fabric[@]}" link set "${name}v$i" master "$bridge" up
        ip -n "$name$i" addr add "$subnet.$i/24" dev eth0
        ip -n "$name$i" link set eth0 up
        ip -n "$name$i" link set lo up
    done
    set +e
    trap - ERR
    echo "sim-hosts: $count host(s) up: $(seq -f "$name%g" -s ' ' 1 "$count") at $subnet.1-$count"\
        "$([ "$switches" -gt 0 ] && echo "behind $switches switch(es) of $per")"
}

run() {
    local name=$1 index=$2 dir=$STATE_ROOT/$1
    shift 2
    [ -f "$dir/hosts" ] || { echo "sim-hosts: $name is not up" >&2; exit 1; }
    [ -e "/run/netns/$name$index" ] || { echo "sim-hosts: no host $name$index" >&2; exit 1; }
    exec nsenter --net="/run/netns/$name$index" unshare --mount --uts \
        sh -c 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"' \
        "$dir/hosts" "$name$index" "$@"
}

down() {
    local name=$1 ns pid
    check_name "$name"
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name[0-9]+$"); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        # the fabric's end of the pair first: removing a namespace removes its links later, in
        # the kernel's own time, and a killed process can still hold the namespace for a moment
        ip -n "${name}net" link del "${name}v${ns#"$name"}" 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
    ip netns del "${name}net" 2>/dev/null  # the bridges, switches and uplinks with it
    rm -rf "${STATE_ROOT:?}/$name"
    return 0
}

# A slow host or link, with the kernel's htb qdisc (rate limits: this kernel has no netem, so no
# added delay). Removed with the host.
slow() {
    local name=$1 index=$2 rate=$3 device
    [ -e "/run/netns/$name$index" ] || { echo "sim-hosts: no host $name$index" >&2; exit 1; }
    set -e
    for device in "${name}v$index" eth0; do
        local where=(ip netns exec "${name}net")
        [ "$device" = eth0 ] && where=(ip netns exec "$name$index")
        "${where[@]}" tc qdisc add dev "$device" root handle 1: htb default 10 2>/dev/null
        "${where[@]}" tc class add dev "$device" parent 1: classid 1:10 htb rate "$rate" 2>/dev/null
    done
    echo "sim-hosts: $name$index's link at $rate both ways"
}

slow_link() {
    local name=$1 a=$2 b=$3 rate=$4 subnet me other
    subnet=$(awk '{print $2}' "$STATE_ROOT/$name/layout")
    set -e
    for me in "$a" "$b"; do
        other=$([ "$me" = "$a" ] && echo "$b" || echo "$a")
        [ -e "/run/netns/$name$me" ] || { echo "sim-hosts: no host $name$me" >&2; exit 1; }
        local tc=(ip netns exec "$name$me" tc)
        "${tc[@]}" qdisc add dev eth0 root handle 1: htb default 20 2>/dev/null
        "${tc[@]}" class add dev eth0 parent 1: classid 1:10 htb rate "$rate" 2>/dev/null
        "${tc[@]}" class add dev eth0 parent 1: classid 1:20 htb rate 100gbit 2>/dev/null
        "${tc[@]}" filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst \
            "$subnet.$other/32" flowid 1:10
    done
    echo "sim-hosts: the link $name$a-$name$b at $rate both ways"
}

slow_uplink() {
    local name=$1 switch=$2 rate=$3 device
    local tc=(ip netns exec "${name}net" tc)
    ip -n "${name}net" link show "${name}u$switch" > /dev/null 2>&1 || { echo "sim-hosts: no switch $switch in $name" >&2; exit 1; }
    set -e
    for device in "${name}u$switch" "${name}c$switch"; do  # into the switch; out of it
        "${tc[@]}" qdisc add dev "$device" root handle 1: htb default 10
        "${tc[@]}" class add dev "$device" parent 1: classid 1:10 htb rate "$rate"
    done
    echo "sim-hosts: switch $switch's uplink in $name at $rate both ways"
}

topology() {
    local name=$1 count per k first last
    [ -f "$STATE_ROOT/$name/layout" ] || { echo "sim-hosts: $name is not up" >&2; exit 1; }
    read -r count _ per < "$STATE_ROOT/$name/layout"
    [ "${per:-0}" -gt 0 ] || { echo "sim-hosts: $name has no switches (up ... PER_SWITCH)" >&2; exit 1; }
    k=0
    for first in $(seq 1 "$per" "$count"); do
        k=$((k + 1))
        last=$((first + per - 1 < count ? first + per - 1 : count))
        echo "SwitchName=s$k Nodes=$name[$first-$last]"
    done
    echo "SwitchName=spine Switches=s[1-$k]"
}

# Sets whose run was killed before its `down` (a CI run stopped, a test killed by its timeout):
# their namespaces, bridges and directory stay, under random names. A set is left alone while a
# process runs in any of its hosts or its fabric, or while it is younger than `minutes` (a set
# comes up seconds before its ranks start).
sweep() {
    local minutes=${1:-30} dir name ns busy count age
    [[ $minutes =~ ^[0-9]+$ ]] || { echo "sim-hosts: MINUTES must be a whole number: $minutes" >&2; exit 2; }
    [ -d "$STATE_ROOT" ] || return 0
    for dir in $(find "$STATE_ROOT" -mindepth 1 -maxdepth 1 -type d -mmin "+$minutes"); do
        name=$(basename "$dir")
        [[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] || continue
        busy=0 count=0
        for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name([0-9]+|net)$"); do
            [ "$ns" = "${name}net" ] || count=$((count + 1))
            [ -n "$(ip netns pids "$ns" 2>/dev/null)" ] && busy=1
        done
        [ "$busy" = 0 ] || continue
        age=$(( ($(date +%s) - $(stat -c %Y "$dir")) / 60 ))
        down "$name"
        echo "sim-hosts: removed $name, left by a killed run: $count host(s) brought up $age min ago, no process in them" >&2
    done
    return 0
}

case "${1:-}" in
sweep) [ $# -le 2 ] || usage; sweep "${2:-}" ;;
up) [ $# -ge 3 ] || usage; up "$2" "$3" "${4:-}" "${5:-}" ;;
slow-uplink) [ $# -eq 4 ] || usage; slow_uplink "$2" "$3" "$4" ;;
topology) [ $# -eq 2 ] || usage; topology "$2" ;;
slow) [ $# -eq 4 ] || usage; slow "$2" "$3" "$4" ;;
slow-link) [ $# -eq 5 ] || usage; slow_link "$2" "$3" "$4" "$5" ;;
run) [ $# -ge 4 ] || usage; run "$2" "$3" "${@:4}" ;;
down) [ $# -eq 2 ] || usage; down "$2" ;;
*) usage ;;
esac
