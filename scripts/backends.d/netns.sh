# shellcheck shell=bash
# scripts/backends.d/netns.sh — the network-namespace mode: the members of the etcd cluster, of
# the ZooKeeper ensemble and of the Redis Sentinel set each run in a network namespace of their
# own, on an address of their own, so that one can be cut off from its peers while the clients
# (in the root namespace) still reach it: a real partition, which the proxies of the fault suite
# (between a client and its server) cannot make. Sourced by lib.sh.
#
# Chosen by LOCKSMITH_BACKENDS_NETNS=1 at `up` (root; `up` installs iproute2's `ip`), or `auto`
# (on when root: scripts/chaos); stored in the state directory like the port offset, so later
# commands (start, isolate, down ...) use it unasked, and a state directory keeps its mode.
# Off by default: every server then listens on 127.0.0.1, as always.
#
# Layout (S = port offset mod 250, so that two state directories with different offsets do not
# share a network): a bridge lsbrS in the root namespace with 10.88.S.1/24 (the clients' side);
# per member a namespace lsS-ID with a veth pair (lsvS-N on the bridge, eth0 inside) and address
# 10.88.S.(10+N). Members reach each other over the bridge, clients reach them from 10.88.S.1.
# `isolate ID` adds blackhole routes between ID and every other member (both ways), leaving the
# route to the clients: ID keeps serving the clients that reach it, and hears nothing from its
# peers (established connections stall, new ones fail). `heal ID` removes them.

NETNS=$(stored_setting LOCKSMITH_BACKENDS_NETNS netns) || exit 1
if [[ $NETNS == auto ]]; then # scripts/chaos: on where it can be (root), off elsewhere
    if [[ $(id -u) == 0 ]]; then NETNS=1; else NETNS=0; fi
fi
NETNS=${NETNS:-0}
[[ $NETNS == [01] ]] || {
    echo "backends: error: LOCKSMITH_BACKENDS_NETNS must be 0, 1 or auto" >&2
    exit 1
}
readonly NETNS
readonly NETNS_NET=$((PORT_OFFSET % 250))
readonly NETNS_BRIDGE=lsbr$NETNS_NET NETNS_GATEWAY=10.88.$NETNS_NET.1

NETNS_IDS=() # the ids that get a namespace in this mode, in address order (netns_ids)

# netns_ids ID...: a kind's members that run in namespaces of their own in the netns mode.
netns_ids() { NETNS_IDS+=("$@"); }

netns_index() { # N of ID (1-based), or nothing when ID has no namespace
    local i
    ((NETNS == 1)) || return 0
    for i in "${!NETNS_IDS[@]}"; do
        [[ ${NETNS_IDS[$i]} != "$1" ]] || echo $((i + 1))
    done
}

# The address server ID listens on: its namespace's, or 127.0.0.1.
host_of() {
    local n
    n=$(netns_index "$1")
    if [[ -n $n ]]; then echo "10.88.$NETNS_NET.$((10 + n))"; else echo "$HOST"; fi
}

netns_name() { echo "ls$NETNS_NET-$1"; }

# The command prefix that runs a command in ID's namespace (nothing for other servers).
netns_exec() {
    [[ -z $(netns_index "$1") ]] || echo "ip netns exec $(netns_name "$1")"
}

# Creates the bridge and ID's namespace, link and address unless they exist.
netns_ensure() {
    local id=$1 n ns veth
    n=$(netns_index "$id")
    [[ -n $n ]] || return 0
    ns=$(netns_name "$id") veth=lsv$NETNS_NET-$n
    if ! ip link show "$NETNS_BRIDGE" >/dev/null 2>&1; then
        ip link add "$NETNS_BRIDGE" type bridge || die "netns: cannot create bridge $NETNS_BRIDGE (root needed)"
        ip addr add "$NETNS_GATEWAY/24" dev "$NETNS_BRIDGE"
        ip link set "$NETNS_BRIDGE" up
    fi
    ip netns list | grep -qw "^$ns" && return 0
    ip netns add "$ns" || die "netns: cannot create namespace $ns"
    ip link add "$veth" type veth peer name "lsp$NETNS_NET-$n"
    ip link set "lsp$NETNS_NET-$n" netns "$ns"
    ip link set "$veth" master "$NETNS_BRIDGE" up
    ip -n "$ns" link set "lsp$NETNS_NET-$n" name eth0
    ip -n "$ns" addr add "$(host_of "$id")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
}

# Removes every namespace, link and the bridge of this state directory (down).
netns_teardown() {
    local id n
    ((NETNS == 1)) || return 0
    for id in "${NETNS_IDS[@]}"; do
        n=$(netns_index "$id")
        ip link del "lsv$NETNS_NET-$n" 2>/dev/null || true
        ip netns del "$(netns_name "$id")" 2>/dev/null || true
    done
    ip link del "$NETNS_BRIDGE" 2>/dev/null || true
}

netns_need() { # ID: ID must run in a namespace of its own
    ((NETNS == 1)) || die "$2: the servers were not started in network namespaces (LOCKSMITH_BACKENDS_NETNS=1 scripts/backends up)"
    [[ -n $(netns_index "$1") ]] || die "$2: $1 has no namespace of its own (those that do: ${NETNS_IDS[*]})"
}

# isolate/heal ID: add (or delete) blackhole routes between ID and every other member.
netns_routes() {
    local verb=$1 id=$2 other
    for other in "${NETNS_IDS[@]}"; do
        [[ $other != "$id" ]] || continue
        ip -n "$(netns_name "$id")" route "$verb" blackhole "$(host_of "$other")/32" 2>/dev/null || true
        ip -n "$(netns_name "$other")" route "$verb" blackhole "$(host_of "$id")/32" 2>/dev/null || true
    done
}

# Is ID cut off (a blackhole route in its namespace)?
netns_isolated() { [[ -n $(ip -n "$(netns_name "$1")" route show type blackhole 2>/dev/null) ]]; }

((NETNS == 0)) || need_command ip iproute2
