#!/usr/bin/env bash
# Build (or tear down) N test hosts on this machine: network namespaces joined by a private
# bridge, each with its own hostname (a UTS namespace) and a real OpenSSH sshd.
#
#   netns-cluster.sh up N [--name NAME] [--setenv VAR=VALUE]... [--rate RATE] [--docker0]
#                                                 prints the state directory
#   netns-cluster.sh shape NAME|DIR RATE|off      shapes (or unshapes) every host's link
#   netns-cluster.sh down NAME|DIR                removes one cluster
#   netns-cluster.sh down --all                   removes every cluster
#   netns-cluster.sh list
#
# After `up`, the state directory holds ssh_config, known_hosts, the user key id_ed25519 and
# cluster.json, so by hand:   ssh -F "$dir/ssh_config" h1 hostname
#
# Addresses live on the cluster's own bridge only (10.213.X.0/24, X picked free); the
# namespaces get no default route, so nothing they send leaves the bridge.
# --setenv values are set by every sshd for its sessions (sshd_config SetEnv), e.g.
# PYTHONPATH for a gcurun that is not installed. Needs root, ip, unshare, sshd, ssh-keygen.
#
# --rate (or `shape`) puts a tc token bucket (tbf) at RATE (500mbit, 2gbit, 2.5gbit, ...) on
# both ends of every host's veth, so traffic each way between a host and the bridge is
# shaped; the rate is recorded in DIR/link_rate (bits per second). tbf counts whole frames,
# so TCP's payload gets at most 1448/1514 of it (0.956) at MTU 1500.
# --docker0 gives every host a second interface that reaches none of the others, as a
# container bridge does on real hosts: a veth pair inside the host's namespace, one end
# named docker0 with 10.213.255.1/24 on every host (a /24 no cluster's bridge takes), routed
# nowhere off the host. --rate needs tc (iproute2).
set -euo pipefail

BASE=${GCURUN_NETNS_BASE:-/tmp/gcurun-netns}
SUBNET_PREFIX=10.213
READY_SECONDS=10
DOCKER0_X=255                 # $SUBNET_PREFIX.255.0/24: every host's docker0, never a cluster's
TBF_LATENCY=10ms              # queue of the token bucket; with the burst below tbf holds its rate

die() { echo "netns-cluster: $*" >&2; exit 1; }

need_tools() {
    [ "$(id -u)" = 0 ] || die "must run as root (network namespaces and sshd need it)"
    local tool
    for tool in ip unshare ssh-keygen flock; do
        command -v "$tool" >/dev/null || die "'$tool' not found on PATH; install iproute2, util-linux and openssh-client"
    done
    SSHD=$(command -v sshd || true)
    [ -n "$SSHD" ] || { [ -x /usr/sbin/sshd ] && SSHD=/usr/sbin/sshd; } \
        || die "'sshd' not found; install openssh-server"
}

# A /24 under 10.213 that no interface or route on this machine uses yet.
free_subnet() {
    local used x i
    used=$(ip -4 route show table all; ip -4 addr show)
    x=$(( RANDOM % 256 ))
    for (( i = 0; i < 256; i++ )); do
        if (( x != DOCKER0_X )) && ! grep -q "$SUBNET_PREFIX\.$x\." <<<"$used"; then
            echo "$x"; return
        fi
        x=$(( (x + 1) % 256 ))
    done
    die "no free subnet left under $SUBNET_PREFIX.0.0/16"
}

wait_for_port() {  # address: wait until something accepts TCP connections on port 22
    local deadline=$(( SECONDS + READY_SECONDS ))
    while (( SECONDS < deadline )); do
        if timeout 1 bash -c "exec 3<>/dev/tcp/$1/22" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    return 1
}

write_sshd_config() {  # dir host setenv...
    local dir=$1 host=$2; shift 2
    cat >"$dir/$host/sshd_config" <<EOF
Port 22
ListenAddress 0.0.0.0
HostKey $dir/$host/ssh_host_ed25519_key
PidFile $dir/$host/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
MaxSessions 64
MaxStartups 64:30:256
AllowTcpForwarding yes
X11Forwarding no
PrintMotd no
LogLevel VERBOSE
EOF
    local kv
    for kv in "$@"; do echo "SetEnv $kv" >>"$dir/$host/sshd_config"; done
}

# RATE (a number and kbit, mbit or gbit, as tc writes rates) in bits per second.
parse_rate() {
    local bits
    bits=$(awk -v r="$1" 'BEGIN {
        if (r !~ /^[0-9]+(\.[0-9]+)?(kbit|mbit|gbit)$/) exit 1
        n = r; sub(/[kmg]bit$/, "", n)
        u = substr(r, length(r) - 3, 1)
        m = (u == "k") ? 1e3 : (u == "m") ? 1e6 : 1e9
        printf "%.0f", n * m }') \
        || die "rate '$1': write a number and kbit, mbit or gbit, e.g. 2gbit or 500mbit"
    (( bits >= 1000000 && bits <= 100000000000 )) \
        || die "rate '$1' is outside 1mbit-100gbit; pick a rate in that range"
    echo "$bits"
}

# The tbf qdisc of one device at BITS per second (0: none). The bucket holds 1 ms of
# traffic (at least 64 KiB, a whole GSO packet): a smaller one keeps TCP well under the
# rate (measured at 2gbit: 64 KiB gives 1.4 Gbit/s of payload, 250 KB 1.9).
shape_device() {  # netns|"" device bits
    local ns=$1 dev=$2 bits=$3 burst
    local tc_cmd=(tc); [ -z "$ns" ] || tc_cmd=(tc -n "$ns")
    "${tc_cmd[@]}" qdisc del dev "$dev" root 2>/dev/null || true
    (( bits > 0 )) || return 0
    burst=$(( bits / 8000 )); (( burst >= 65536 )) || burst=65536
    "${tc_cmd[@]}" qdisc add dev "$dev" root tbf rate "${bits}bit" burst "$burst" \
        latency "$TBF_LATENCY" || die "tc could not shape $dev${ns:+ in $ns} (is sch_tbf there?)"
}

shape_links() {  # dir name bits: both ends of every host's veth
    local dir=$1 name=$2 bits=$3 i=1
    command -v tc >/dev/null || die "'tc' not found on PATH; install iproute2"
    while [ -d "$dir/h$i" ]; do
        shape_device "" "${name}v$i" "$bits"
        shape_device "$name-h$i" eth0 "$bits"
        i=$(( i + 1 ))
    done
    if (( bits > 0 )); then echo "$bits" >"$dir/link_rate"; else rm -f "$dir/link_rate"; fi
}

add_docker0() {  # netns: a veth pair inside it, one end docker0, both up, nothing routed out
    local ns=$1
    ip -n "$ns" link add docker0 type veth peer name docker0p
    ip -n "$ns" addr add "$SUBNET_PREFIX.$DOCKER0_X.1/24" dev docker0
    ip -n "$ns" link set docker0p up
    ip -n "$ns" link set docker0 up
}

cluster_dir() {  # NAME|DIR -> the state directory of an existing cluster
    local name=${1%/}; name=${name##*/}
    [[ "$name" =~ ^[a-z][a-z0-9]{1,8}$ ]] || die "'$1' is not a cluster name or directory"
    [ -f "$BASE/$name/cluster.json" ] || die "no cluster '$name' under $BASE; see: $0 list"
    echo "$BASE/$name"
}

cmd_shape() {
    local target=${1:-} rate=${2:-} bits dir
    [ -n "$target" ] && [ -n "$rate" ] || die "shape needs a cluster and a rate (2gbit) or off"
    need_tools
    dir=$(cluster_dir "$target")
    if [ "$rate" = off ]; then bits=0; else bits=$(parse_rate "$rate"); fi
    shape_links "$dir" "$(basename "$dir")" "$bits"
    echo "$dir"
}

cmd_up() {
    local count=${1:-}; shift || true
    [[ "$count" =~ ^[1-9][0-9]?$ ]] || die "up needs a host count from 1 to 99, got '${count}'"
    local name="" setenv=() rate_bits=0 docker0=no
    while [ $# -gt 0 ]; do
        case $1 in
            --name) name=$2; shift 2 ;;
            --setenv) setenv+=("$2"); shift 2 ;;
            --rate) rate_bits=$(parse_rate "${2:-}"); shift 2 ;;
            --docker0) docker0=yes; shift ;;
            *) die "unknown option '$1'" ;;
        esac
    done
    need_tools
    (( rate_bits == 0 )) || command -v tc >/dev/null || die "'tc' not found on PATH; install iproute2"
    [ -n "$name" ] || name=gc$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    [[ "$name" =~ ^[a-z][a-z0-9]{1,8}$ ]] || die "cluster name '$name' must be 2-9 lowercase letters/digits, starting with a letter"
    local dir=$BASE/$name
    [ ! -e "$dir" ] || die "cluster '$name' exists already ($dir); run: $0 down $name"
    mkdir -p "$dir" /run/sshd
    trap 'echo "netns-cluster: up failed; tearing down $name" >&2; cmd_down "$name" >/dev/null 2>&1 || true' ERR

    local bridge=${name}br x
    exec 9>"$BASE/.lock"
    flock -w 30 9 || die "could not lock $BASE/.lock within 30 s"
    x=$(free_subnet)
    echo "$SUBNET_PREFIX.$x" >"$dir/subnet"
    ip link add "$bridge" type bridge
    ip addr add "$SUBNET_PREFIX.$x.1/24" dev "$bridge"
    ip link set "$bridge" up
    flock -u 9

    ssh-keygen -q -t ed25519 -N '' -C "gcurun-netns-$name" -f "$dir/id_ed25519"
    cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
    : >"$dir/known_hosts"
    : >"$dir/ssh_config"
    local i host ns addr hosts_json=""
    for (( i = 1; i <= count; i++ )); do
        host=h$i ns=$name-$host addr=$SUBNET_PREFIX.$x.$(( i + 1 ))
        mkdir -p "$dir/$host"
        ssh-keygen -q -t ed25519 -N '' -C "$host" -f "$dir/$host/ssh_host_ed25519_key"
        ip netns add "$ns"
        ip link add "${name}v$i" type veth peer name "${name}p$i"
        ip link set "${name}p$i" netns "$ns"
        ip link set "${name}v$i" master "$bridge" up
        ip -n "$ns" link set "${name}p$i" name eth0
        ip -n "$ns" addr add "$addr/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        [ "$docker0" = no ] || add_docker0 "$ns"
        write_sshd_config "$dir" "$host" "${setenv[@]}"
        ip netns exec "$ns" unshare --uts -- sh -c \
            "hostname '$host' && exec '$SSHD' -f '$dir/$host/sshd_config' -E '$dir/$host/sshd.log'"
        echo "$host,$addr $(cut -d' ' -f1,2 "$dir/$host/ssh_host_ed25519_key.pub")" >>"$dir/known_hosts"
        cat >>"$dir/ssh_config" <<EOF
Host $host
    HostName $addr
    User root
    Port 22
    IdentityFile $dir/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $dir/known_hosts
    StrictHostKeyChecking yes
    BatchMode yes

EOF
        hosts_json+="${hosts_json:+, }{\"name\": \"$host\", \"address\": \"$addr\", \"netns\": \"$ns\"}"
    done
    (( rate_bits == 0 )) || shape_links "$dir" "$name" "$rate_bits"
    for (( i = 1; i <= count; i++ )); do
        wait_for_port "$SUBNET_PREFIX.$x.$(( i + 1 ))" \
            || die "sshd of h$i did not listen within $READY_SECONDS s; see $dir/h$i/sshd.log"
    done
    cat >"$dir/cluster.json" <<EOF
{"name": "$name", "dir": "$dir", "bridge": "$bridge", "gateway": "$SUBNET_PREFIX.$x.1",
 "ssh_config": "$dir/ssh_config", "known_hosts": "$dir/known_hosts",
 "identity_file": "$dir/id_ed25519", "hosts": [$hosts_json],
 "docker0": $([ "$docker0" = no ] && echo null || echo "\"$SUBNET_PREFIX.$DOCKER0_X.1\"")}
EOF
    trap - ERR
    echo "$dir"
}

cmd_down() {
    local target=${1:-}
    [ -n "$target" ] || die "down needs a cluster name, its directory, or --all"
    if [ "$target" = --all ]; then
        local d
        for d in "$BASE"/*/; do [ -d "$d" ] && cmd_down "$(basename "$d")"; done
        return 0
    fi
    local name=${target%/}; name=${name##*/}
    [[ "$name" =~ ^[a-z][a-z0-9]{1,8}$ ]] || die "'$target' is not a cluster name or directory"
    local ns pids
    for ns in $(ip netns list | awk '{print $1}' | grep "^$name-h[0-9]*$" || true); do
        # Every process still in the namespace (sshd, sessions, stray ranks) goes first.
        pids=$(ip netns pids "$ns" || true)
        [ -z "$pids" ] || kill -TERM $pids 2>/dev/null || true
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            pids=$(ip netns pids "$ns" || true)
            [ -n "$pids" ] || break
            sleep 0.1
        done
        [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    local link
    for link in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 \
                  | grep -E "^${name}v[0-9]+$" || true); do
        ip link del "$link" 2>/dev/null || true
    done
    ip link del "${name}br" 2>/dev/null || true
    rm -rf "${BASE:?}/$name"
    echo "removed $name"
}

cmd_list() {
    local d
    for d in "$BASE"/*/; do
        [ -f "$d/cluster.json" ] && echo "$(basename "$d") $(cat "$d/subnet" 2>/dev/null).0/24 $d"
    done
    return 0
}

case ${1:-} in
    up) shift; cmd_up "$@" ;;
    shape) shift; cmd_shape "$@" ;;
    down) shift; cmd_down "$@" ;;
    list) cmd_list ;;
    *) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
