# shellcheck shell=bash
# scripts/backends.d/etcd.sh — etcd: a single server `etcd` and a 3-member cluster `etcd-1..3`.
# A server kind for scripts/backends (the interface is described in lib.sh).

register_ids etcd single etcd
register_ids etcd cluster etcd-1 etcd-2 etcd-3
netns_ids etcd-1 etcd-2 etcd-3
leader_group etcd-cluster "etcd cluster leader" etcd-1 etcd-2 etcd-3
need_command etcd etcd-server
need_command etcdctl etcd-client

# etcd's minimum lease TTL is ceil(1.5 * election timeout) seconds (etcd 3.4:
# minTTL = (3 * electionTicks / 2) * heartbeat). The single server uses a short election
# timeout so that tests may use 1 s leases; it has no peers, so elections never happen
# after startup. The cluster keeps etcd's defaults (100/1000 ms, minimum TTL 2 s): on a
# 2-core machine that is also compiling, 50/500 ms risks spurious leader changes that would
# make tests flaky. A killed leader is replaced within ~1-2 s either way.
readonly ETCD_HEARTBEAT_MS=${LOCKSMITH_ETCD_HEARTBEAT_MS:-50}
readonly ETCD_ELECTION_MS=${LOCKSMITH_ETCD_ELECTION_MS:-500}
readonly ETCD_CLUSTER_HEARTBEAT_MS=${LOCKSMITH_ETCD_CLUSTER_HEARTBEAT_MS:-100}
readonly ETCD_CLUSTER_ELECTION_MS=${LOCKSMITH_ETCD_CLUSTER_ELECTION_MS:-1000}

etcd_ports() { # client 23790 (+member), peer 23800 (+member)
    local n
    n=$(member_of "$1")
    port $((23790 + ${n:-0}))
    port $((23800 + ${n:-0}))
}

# Launches etcd `id`: member `name`, clients on `scheme://host:cport`, peers on plain http
# `pport`, the first start joining `cluster` (`token`), heartbeat `hb` and election timeout `el`
# in ms; further arguments go to etcd (TLS files, a quota). `--initial-cluster*` only matter on
# the first start: a restart (same --data-dir) rejoins with the membership stored there.
etcd_launch() {
    local id=$1 name=$2 scheme=$3 host=$4 cport=$5 pport=$6 cluster=$7 token=$8 hb=$9 el=${10}
    shift 10
    launch "$id" etcd \
        --name "$name" \
        --data-dir "$STATE/$id/data" \
        --listen-client-urls "$scheme://$host:$cport" \
        --advertise-client-urls "$scheme://$host:$cport" \
        --listen-peer-urls "http://$host:$pport" \
        --initial-advertise-peer-urls "http://$host:$pport" \
        --initial-cluster "$cluster" \
        --initial-cluster-token "$token" \
        --initial-cluster-state new \
        --heartbeat-interval "$hb" \
        --election-timeout "$el" \
        --logger zap --log-outputs stderr \
        "$@"
}

# Launches `id` as the one member of a cluster of its own (the single, secured and quota kinds):
# member `name`, clients on `scheme://host:cport`, peers on `pport`, cluster `token`; further
# arguments go to etcd.
etcd_launch_alone() {
    local id=$1 name=$2 scheme=$3 host=$4 cport=$5 pport=$6 token=$7
    shift 7
    etcd_launch "$id" "$name" "$scheme" "$host" "$cport" "$pport" "$name=http://$host:$pport" "$token" \
        "$ETCD_HEARTBEAT_MS" "$ETCD_ELECTION_MS" "$@"
}

etcd_start() {
    local id=$1 n cport pport host cluster
    n=$(member_of "$id")
    host=$(host_of "$id")
    cport=$(port $((23790 + ${n:-0})))
    pport=$(port $((23800 + ${n:-0})))
    if [[ -z $n ]]; then
        etcd_launch_alone "$id" etcd http "$host" "$cport" "$pport" locksmith-single
        return
    fi
    cluster="e1=http://$(host_of etcd-1):$(port 23801),e2=http://$(host_of etcd-2):$(port 23802),e3=http://$(host_of etcd-3):$(port 23803)"
    etcd_launch "$id" "e$n" http "$host" "$cport" "$pport" "$cluster" locksmith-cluster \
        "$ETCD_CLUSTER_HEARTBEAT_MS" "$ETCD_CLUSTER_ELECTION_MS"
}

etcdctl_() { # ID ARGS...: etcdctl against ID, with short timeouts
    local addr
    addr=$(address "$1")
    shift
    ETCDCTL_API=3 timeout 10 etcdctl --endpoints="http://$addr" \
        --dial-timeout=1s --command-timeout=3s "$@"
}

etcd_ready() {
    # The cheap check first: etcdctl waits its whole dial timeout on a closed port.
    port_open "$(client_port "$1")" "$(host_of "$1")" && etcdctl_ "$1" endpoint health >/dev/null 2>&1
}

etcd_is_leader() {
    local out
    # -w simple: endpoint, member id, version, db size, IS LEADER, is learner, ...
    out=$(etcdctl_ "$1" endpoint status -w simple 2>/dev/null) || return 1
    [[ $(awk -F', ' '{print $5}' <<<"$out") == true ]]
}

# `down` stops everything at once (the JVMs take a moment each), except the etcd cluster's
# leader: on SIGTERM an etcd leader hands leadership to a follower first, and if the followers
# are stopping too it waits etcd's request timeout (5 s + 2 election timeouts) for nothing.
# Stopped after its followers, it finds no peer to hand over to and exits.
etcd_stop_last() { find_leader etcd-cluster || true; }

etcd_exports() {
    case $1 in
    single) emit LOCKSMITH_TEST_ETCD "etcd://$(address etcd)" ;;
    cluster) emit LOCKSMITH_TEST_ETCD_CLUSTER "etcd://$(addresses etcd-1 etcd-2 etcd-3)" ;;
    esac
}
