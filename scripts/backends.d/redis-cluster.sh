# shellcheck shell=bash
# scripts/backends.d/redis-cluster.sh — Redis Cluster: three masters `cluster-1..3`, each with
# a replica `cluster-r1..r3` (cluster-rN replicates cluster-N when `up` makes the cluster). A
# server kind for scripts/backends (the interface is described in lib.sh); loaded after
# redis.sh, whose config lines, start, redis-cli wrapper and settle wait it shares.
#
# No data persistence (a restart is an empty server), but each node keeps its cluster config
# (nodes.conf: its node id, epochs, the other nodes) in its state dir, so a node that is started
# again rejoins the cluster: a killed master, failed over to its replica by the cluster itself
# (cluster-node-timeout 2 s), comes back as that replica's replica.
# The cluster is made by the first `up all` of a state directory (redis_cluster_assemble, after
# every node answers) and reused by later ones. `reshard redis-cluster SLOT [ID]` moves one
# slot with its keys; `slot-owner redis-cluster SLOT` prints the id of the master serving it.

register_ids redis-cluster cluster cluster-1 cluster-2 cluster-3 cluster-r1 cluster-r2 cluster-r3
need_command redis-server redis-server
need_command redis-cli redis-tools

readonly CLUSTER_MASTERS=(cluster-1 cluster-2 cluster-3)
readonly CLUSTER_NODES=("${CLUSTER_MASTERS[@]}" cluster-r1 cluster-r2 cluster-r3)

redis_cluster_ports() { # client 17001-17003 (cluster-N), 17004-17006 (cluster-rN); bus +10000
    local p=$((17000 + $(member_of "$1")))
    [[ $1 != cluster-r* ]] || p=$((p + 3))
    port "$p"
    port $((p + 10000))
}

redis_cluster_start() {
    redis_start "$1" "cluster-enabled yes" "cluster-config-file $STATE/$1/nodes.conf" \
        "cluster-node-timeout 2000" "cluster-announce-ip $HOST" "replica-announce-ip $HOST" \
        "# a replica fails over however long it has been cut off from its master" \
        "cluster-replica-validity-factor 0"
}

cluster_field() { # ID SECTION FIELD: FIELD of `CLUSTER INFO` (SECTION cluster) or `INFO SECTION`
    local cmd=(info "$2")
    [[ $2 != cluster ]] || cmd=(cluster info)
    redis_cli "$1" "${cmd[@]}" 2>/dev/null | tr -d '\r' | sed -n "s/^$3://p"
}

cluster_is_fresh() { [[ $(cluster_field "$1" cluster cluster_known_nodes) == 1 ]]; } # in no cluster

# Answers, and: is in no cluster yet (`up` makes one), or sees the cluster ok and, if it is a
# replica, has its link to its master up.
redis_cluster_ready() {
    local out
    out=$(redis_cli "$1" cluster info 2>/dev/null | tr -d '\r') || return 1
    [[ $out == *$'cluster_known_nodes:1\n'* ]] && return 0
    [[ $out == *cluster_state:ok* ]] || return 1
    out=$(redis_cli "$1" info replication 2>/dev/null) || return 1
    [[ $out == *role:master* || $out == *master_link_status:up* ]]
}

redis_cluster_settle() { redis_settle "$1"; } # see redis.sh

cluster_id_of_port() { # the node on port $1 (empty if none)
    local id
    for id in "${CLUSTER_NODES[@]}"; do
        [[ $(client_port "$id") != "$1" ]] || echo "$id"
    done
}

cluster_master_of() { # ID: ID if it is a master, else the node it replicates
    [[ $(cluster_field "$1" replication role) != master ]] || { echo "$1" && return; }
    cluster_id_of_port "$(cluster_field "$1" replication master_port)"
}

cluster_tool() { # redis-cli --cluster ...; its output on stderr only if it fails
    local out
    out=$(timeout "$WAIT_SECS" redis-cli --cluster "$@" </dev/null 2>&1) ||
        die "redis-cli --cluster $1 failed: $out"
}

# `up`, once every node answers: make the cluster (every node is in none: cluster-1..3 get
# the slots, cluster-rN replicates cluster-N) or reuse it (a node in none joins as a replica of
# its partner's master: cluster-N <-> cluster-rN); then wait until every node sees it ok.
redis_cluster_assemble() {
    local id partner master addrs fresh=() t0=$SECONDS deadline=$((SECONDS + WAIT_SECS))
    for id in "${CLUSTER_NODES[@]}"; do
        if cluster_is_fresh "$id"; then fresh+=("$id"); fi
    done
    if ((${#fresh[@]} == ${#CLUSTER_NODES[@]})); then
        log "creating the Redis Cluster: masters ${CLUSTER_MASTERS[*]}"
        IFS=, read -ra addrs <<<"$(addresses "${CLUSTER_MASTERS[@]}")"
        cluster_tool create "${addrs[@]}" --cluster-replicas 0 --cluster-yes
        fresh=("${fresh[@]:${#CLUSTER_MASTERS[@]}}")
    elif ((${#fresh[@]})); then
        log "Redis Cluster: ${fresh[*]} in no cluster: joining as replicas"
    fi
    for id in "${fresh[@]}"; do
        [[ $id == cluster-r* ]] && partner=${id/-r/-} || partner=${id/-/-r}
        master=$(cluster_master_of "$partner")
        if [[ -z $master ]] || cluster_is_fresh "$master"; then
            die "$id is in no cluster and its partner $partner cannot tell it a master: scripts/backends down, then up"
        fi
        log "$id joins as a replica of $master"
        cluster_tool add-node "$(address "$id")" "$(address "$master")" --cluster-slave \
            --cluster-master-id "$(redis_cli "$master" cluster myid)"
    done
    until cluster_settled; do
        ((SECONDS < deadline)) || die "the Redis Cluster is not ok after ${WAIT_SECS}s: $(redis_cli cluster-1 cluster nodes 2>&1)"
        sleep 0.2
    done
    log "Redis Cluster ok: 3 masters, 3 replicas ($((SECONDS - t0))s)"
}

cluster_settled() { # every node: cluster ok, 6 nodes, 3 masters; its link up if a replica
    local id
    for id in "${CLUSTER_NODES[@]}"; do
        [[ $(redis_cli "$id" cluster info 2>/dev/null | tr -d '\r' | grep -cE '^(cluster_state:ok|cluster_known_nodes:6|cluster_size:3)$') == 3 ]] &&
            redis_cluster_ready "$id" || return 1
    done
}

cluster_any() { # the first running node that answers
    local id
    for id in "${CLUSTER_NODES[@]}"; do
        owned_pid "$id" >/dev/null && [[ $(redis_cli "$id" ping 2>/dev/null) == PONG ]] && echo "$id" && return 0
    done
    die "no node of the Redis Cluster answers"
}

cluster_owner_seen_by() { # ID SLOT: the master serving SLOT, as ID sees it (from CLUSTER NODES)
    cluster_id_of_port "$(redis_cli "$1" cluster nodes 2>/dev/null | awk -v s="$2" '
        $3 ~ /master/ { for (i = 9; i <= NF; i++) if ($i !~ /^\[/) {
            n = split($i, r, "-"); if (s + 0 >= r[1] + 0 && s + 0 <= r[n] + 0) {
                split($2, a, "[:@]"); print a[2]; exit } } }')"
}

cluster_slot_arg() {
    [[ $1 =~ ^[0-9]{1,5}$ && $((10#$1)) -lt 16384 ]] || die "expected a slot number 0-16383, got '$1'"
}

redis_cluster_slot_owner() { # GROUP SLOT
    local node owner
    cluster_slot_arg "${2:-}"
    node=$(cluster_any)
    owner=$(cluster_owner_seen_by "$node" "$2")
    [[ -n $owner ]] || die "no master serves slot $2"
    echo "$owner"
}

# reshard redis-cluster SLOT [TO]: move SLOT with its keys to master TO (default: the next
# master after its owner, in id order) by CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT
# NODE; wait until every running node says TO serves it; print TO.
redis_cluster_reshard() {
    local slot=${2:-} to=${3:-} from masters=() i id sid did keys deadline=$((SECONDS + WAIT_SECS))
    from=$(redis_cluster_slot_owner "$1" "$slot")
    slot=$((10#$slot))
    for id in "${CLUSTER_NODES[@]}"; do
        owned_pid "$id" >/dev/null && [[ $(cluster_field "$id" replication role) == master ]] &&
            masters+=("$id")
    done
    if [[ -z $to ]]; then # the master after $from, cycling
        for i in "${!masters[@]}"; do
            [[ ${masters[i]} != "$from" ]] || to=${masters[(i + 1) % ${#masters[@]}]}
        done
    fi
    [[ " ${masters[*]} " == *" $to "* ]] || die "reshard: '$to' is not a running master (masters: ${masters[*]})"
    if [[ $to == "$from" ]]; then
        log "slot $slot is already served by $to"
        echo "$to"
        return
    fi
    sid=$(redis_cli "$from" cluster myid) did=$(redis_cli "$to" cluster myid)
    [[ $(redis_cli "$to" cluster setslot "$slot" importing "$sid") == OK &&
        $(redis_cli "$from" cluster setslot "$slot" migrating "$did") == OK ]] ||
        cluster_reshard_failed "$slot" "$from" "$to" "could not open slot $slot for migration"
    # (no keys: one empty line)
    while mapfile -t keys < <(redis_cli "$from" cluster getkeysinslot "$slot" 100) && [[ -n ${keys[0]:-} ]]; do
        [[ $(redis_cli "$from" migrate "$HOST" "$(client_port "$to")" "" 0 2000 keys "${keys[@]}") == OK ]] ||
            cluster_reshard_failed "$slot" "$from" "$to" "MIGRATE of slot $slot from $from to $to failed"
    done
    for id in "$to" "$from" "${masters[@]}"; do
        redis_cli "$id" cluster setslot "$slot" node "$did" >/dev/null
    done
    until cluster_slot_agreed "$slot" "$to"; do
        ((SECONDS < deadline)) || die "reshard: the nodes do not all agree that $to serves slot $slot"
        sleep 0.2
    done
    log "slot $slot moved from $from to $to"
    echo "$to"
}

cluster_reshard_failed() { # SLOT FROM TO MESSAGE: close the slot again, and fail
    local id
    for id in "$2" "$3"; do redis_cli "$id" cluster setslot "$1" stable >/dev/null 2>&1 || true; done
    die "reshard: $4 (keys already moved stay on $3; redis-cli --cluster fix $(address "$2") repairs)"
}

cluster_slot_agreed() { # SLOT ID: every running node says ID serves SLOT
    local id
    for id in "${CLUSTER_NODES[@]}"; do
        owned_pid "$id" >/dev/null || continue
        [[ $(cluster_owner_seen_by "$id" "$1") == "$2" ]] || return 1
    done
}

redis_cluster_exports() {
    [[ $1 == cluster ]] || return 0
    emit LOCKSMITH_TEST_REDIS_CLUSTER "redis-cluster://$(addresses "${CLUSTER_MASTERS[@]}")"
}
