# shellcheck shell=bash
# scripts/backends.d/redis-sentinel.sh — Redis Sentinel: a master `sentinel-m`, its replica
# `sentinel-r`, and three sentinels `sentinel-s1..3` that monitor them under the name
# `locksmith` (quorum 2) and fail over in a few seconds. A server kind for scripts/backends (the
# interface is described in lib.sh); loaded after redis.sh, whose config lines, start, redis-cli
# wrapper and settle wait it shares.
#
# The data servers have no persistence (like `redis`): a restart is an empty server. Which of
# the two is the master changes with every failover (`scripts/backends leader redis-sentinel`
# prints it; `scripts/backends failover redis-sentinel` makes one). A data server that starts
# replicates the master that the sentinels name (sentinel-m when no sentinel knows one), so a
# killed master that is started again after a failover comes back as a replica.
# A sentinel rewrites its own config file (current master, epochs, the replicas and sentinels
# it knows): it is written once, by the first start in a state directory, and reused by every
# later start (`stop` + `start` of a sentinel keeps what it knew).

register_ids redis-sentinel cluster sentinel-m sentinel-r sentinel-s1 sentinel-s2 sentinel-s3
leader_group redis-sentinel "Redis Sentinel master" sentinel-m sentinel-r
netns_ids sentinel-m sentinel-r sentinel-s1 sentinel-s2 sentinel-s3
need_command redis-server redis-server
need_command redis-cli redis-tools

readonly SENTINEL_MASTER=locksmith SENTINEL_DATA=(sentinel-m sentinel-r)
readonly SENTINEL_IDS=(sentinel-s1 sentinel-s2 sentinel-s3)

redis_sentinel_ports() { # data servers 16392 (m), 16393 (r); sentinels 26390-26392
    case $1 in
    sentinel-m) port 16392 ;;
    sentinel-r) port 16393 ;;
    *) port $((26389 + $(member_of "$1"))) ;;
    esac
}

sentinel_is_data() { [[ $1 == sentinel-[mr] ]]; }

# The sentinels' answer for the master: "HOST PORT" from the first sentinel that knows it.
sentinel_master_addr() {
    local id out
    for id in "${SENTINEL_IDS[@]}"; do
        out=$(redis_cli "$id" SENTINEL get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null) || continue
        [[ $out =~ ^([^$'\n']+)$'\n'([0-9]+)$ ]] || continue
        echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
        return 0
    done
    return 1
}

sentinel_id_of_port() { # the data server on port $1 (empty if none)
    local id
    for id in "${SENTINEL_DATA[@]}"; do
        [[ $(client_port "$id") != "$1" ]] || echo "$id"
    done
}

# The data server the sentinels call master: asked of the sentinels, else read from a sentinel's
# (rewritten) config file, else sentinel-m (nothing was ever started).
sentinel_current_master() {
    local addr f
    if addr=$(sentinel_master_addr); then
        sentinel_id_of_port "${addr#* }"
        return
    fi
    for f in "$STATE"/sentinel-s[123]/sentinel.conf; do
        [[ -f $f ]] || continue
        addr=$(sed -n "s/^sentinel monitor $SENTINEL_MASTER [^ ]* \([0-9]*\) .*/\1/p" "$f")
        [[ -z $addr ]] || {
            sentinel_id_of_port "$addr"
            return
        }
    done
    echo sentinel-m
}

# The master every running sentinel names, once they agree: after a failover one sentinel can
# lag behind the others for seconds, and a data server started meanwhile as a replica of the new
# master looks to it like the old master come back; it then turns the new master into a replica
# of the old one, which has no data (seen: a held lock lost to a second, unasked-for failover
# 4 s after the first, sentinel.rs killed_master_keeps_a_confirmed_lock). Waits up to 30 s for
# agreement, then takes sentinel_current_master's answer; at once when no sentinel answers
# (nothing started yet).
sentinel_agreed_master() {
    local id addr ports deadline=$((SECONDS + 30))
    while :; do
        ports=()
        for id in "${SENTINEL_IDS[@]}"; do
            owned_pid "$id" >/dev/null || continue
            addr=$(redis_cli "$id" SENTINEL get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null) || continue
            if [[ $addr == *$'\n'* ]]; then ports+=("${addr##*$'\n'}"); fi
        done
        ((${#ports[@]} > 0)) || break
        if [[ $(printf '%s\n' "${ports[@]}" | sort -u | wc -l) == 1 ]]; then
            sentinel_id_of_port "${ports[0]}"
            return
        fi
        ((SECONDS < deadline)) || break
        sleep 0.2
    done
    sentinel_current_master
}

redis_sentinel_start() {
    local id=$1 dir="$STATE/$1" master
    if sentinel_is_data "$id"; then
        master=$(sentinel_agreed_master)
        if [[ -n $master && $master != "$id" ]]; then
            log "$id: replica of $master (the sentinels' master)"
            redis_start "$id" "replica-announce-ip $(host_of "$id")" "replicaof $(address "$master" | tr : ' ')"
        else
            redis_start "$id" "replica-announce-ip $(host_of "$id")"
        fi
        return
    fi
    [[ -s $dir/sentinel.conf ]] || cat >"$dir/sentinel.conf" <<EOF
# written by scripts/backends for sentinel '$id'; the sentinel rewrites this file as it runs
bind $(host_of "$id")
port $(client_port "$id")
$(redis_protected_mode "$id")
daemonize no
dir $dir
logfile ""
set-proc-title no
# tell clients and the other sentinels the address they reach us on
sentinel announce-ip $(host_of "$id")
sentinel monitor $SENTINEL_MASTER $(host_of sentinel-m) $(port 16392) 2
sentinel down-after-milliseconds $SENTINEL_MASTER 1000
sentinel failover-timeout $SENTINEL_MASTER 5000
sentinel parallel-syncs $SENTINEL_MASTER 1
EOF
    launch "$id" redis-server "$dir/sentinel.conf" --sentinel
}

sentinel_info() { # ID FIELD: a field of INFO replication
    redis_cli "$1" info replication 2>/dev/null | tr -d '\r' | sed -n "s/^$2:\(.*\)/\1/p"
}

# Data servers: answer, and a replica's link to its master is up. Sentinels: name a master that
# says role:master (a sentinel started again may name the one of before a failover for a moment),
# list a replica, and know the two other sentinels (a failover needs them).
redis_sentinel_ready() {
    local id=$1 out
    if sentinel_is_data "$id"; then
        out=$(redis_cli "$id" info replication 2>/dev/null) || return 1
        [[ $out == *role:master* || $out == *master_link_status:up* ]]
        return
    fi
    out=$(redis_cli "$id" SENTINEL get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null) || return 1
    out=$(sentinel_id_of_port "${out##*$'\n'}")
    [[ -n $out && $(sentinel_info "$out" role) == master ]] || return 1
    out=$(redis_cli "$id" SENTINEL replicas "$SENTINEL_MASTER" 2>/dev/null) && [[ -n $out ]] || return 1
    out=$(redis_cli "$id" SENTINEL master "$SENTINEL_MASTER" 2>/dev/null) || return 1
    [[ $out == *$'num-other-sentinels\n2'* ]]
}

# The master: says role:master, and is the one the sentinels name (when one answers): just
# after a failover the old master says role:master too, until the sentinels turn it into a
# replica.
redis_sentinel_is_leader() {
    local addr
    [[ $(sentinel_info "$1" role) == master ]] || return 1
    addr=$(sentinel_master_addr) || return 0
    [[ ${addr#* } == "$(client_port "$1")" ]]
}

redis_sentinel_settle() { ! sentinel_is_data "$1" || redis_settle "$1"; } # see redis.sh

# failover redis-sentinel: SENTINEL FAILOVER on the first sentinel that accepts it (retried
# while none can, e.g. "NOGOODSLAVE" just after a start); once every running sentinel names the
# new master, turn the old one into its replica as the sentinels would (REPLICAOF, and CLIENT
# KILL TYPE normal so that its clients reconnect), but now rather than ~10 s later, and undo a
# stale sentinel's conversion of the new master (see sentinel_mend); then wait until the old one
# replicates with its link up. Prints the new master's id. Gives up after 60 s (a loaded machine
# has taken over 30 s for the sentinels to agree).
redis_sentinel_failover() {
    local old new id out deadline=$((SECONDS + 60)) t0=$SECONDS
    old=$(find_leader redis-sentinel) || die "failover: redis-sentinel has no master now"
    [[ $old == sentinel-m ]] && new=sentinel-r || new=sentinel-m
    owned_pid "$new" >/dev/null || die "failover: $new (the replica) is not running"
    # A sentinel polls a replica's INFO only every 10 s. One that has not seen $new as a replica
    # since the last failover takes its promotion for an old state and turns it straight back into
    # a replica (+convert-to-slave), which aborts this failover (seen in the fault suite).
    until sentinels_see_replica "$new"; do
        ((SECONDS < deadline)) || die "failover: not every sentinel has seen $new as a replica after 60s"
        sleep 0.2
    done
    until [[ ${out:-} == OK ]]; do
        ((SECONDS < deadline)) || die "failover: no sentinel would fail over: ${out:-no answer}"
        for id in "${SENTINEL_IDS[@]}"; do
            out=$(redis_cli "$id" SENTINEL failover "$SENTINEL_MASTER" 2>&1) && [[ $out == OK ]] && break
        done
        [[ $out == OK ]] || sleep 0.5
    done
    log "failover: $id started a failover from $old to $new"
    until sentinels_name "$new"; do
        ((SECONDS < deadline)) || die "failover: the sentinels do not all name $new after 60s ($(sentinels_view))"
        # The others learn of the failover from the hello messages of the sentinel that made it;
        # on a loaded machine one has stayed behind for over a minute. Once a majority names the
        # new master the failover is decided: point a sentinel still behind at it, as an operator
        # would.
        if ((SECONDS - t0 >= 15)) && sentinels_behind "$new"; then
            log "failover: sentinels behind after $((SECONDS - t0))s ($(sentinels_view)); pointing them at $new"
            sentinels_repoint "$new"
        fi
        sleep 0.2
    done
    until sentinel_failover_done "$old" "$new"; do
        ((SECONDS < deadline)) || die "failover: $new is not the settled master after 60s (leader: $(find_leader redis-sentinel || echo none); $(sentinels_view))"
        sentinel_mend "$old" "$new"
        sleep 0.2
    done
    log "failover: $new is the master, $old its replica ($((SECONDS - t0))s)"
    echo "$new"
}

sentinels_name() { # ID: every running sentinel names ID as the master
    local id addr
    for id in "${SENTINEL_IDS[@]}"; do
        owned_pid "$id" >/dev/null || continue
        addr=$(redis_cli "$id" SENTINEL get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null) || return 1
        [[ ${addr##*$'\n'} == "$(client_port "$1")" ]] || return 1
    done
}

# While the sentinels name NEW: a sentinel that had not yet heard of the failover when NEW said
# role:master may have turned it back into a replica of OLD (+convert-to-slave); with OLD turned
# into NEW's replica that is a replication loop, which the sentinels end ~20 s later by failing
# over again (seen in the fault suite). Make NEW a master again, and OLD its replica (REPLICAOF,
# and CLIENT KILL TYPE normal so that its clients reconnect), as the sentinels would ~10 s later.
sentinel_mend() { # OLD NEW
    sentinels_name "$2" || return 0
    if sentinel_live "$2" && [[ $(sentinel_info "$2" role) == slave ]]; then
        log "failover: $2 was made a replica again by a sentinel behind; making it master"
        redis_cli "$2" REPLICAOF NO ONE >/dev/null || true
    fi
    if sentinel_live "$1" && [[ $(sentinel_info "$1" role) == master ]]; then
        printf '%s\n' MULTI "REPLICAOF $(address "$2" | tr : ' ')" "CLIENT KILL TYPE normal" EXEC |
            redis_cli "$1" >/dev/null || true
    fi
}

sentinels_see_replica() { # ID: every running sentinel's last INFO of ID said role:slave
    local id port
    port=$(client_port "$1")
    for id in "${SENTINEL_IDS[@]}"; do
        owned_pid "$id" >/dev/null || continue
        redis_cli "$id" SENTINEL replicas "$SENTINEL_MASTER" 2>/dev/null | tr -d '\r' |
            awk -v port="$port" 'NR % 2 { key = $0; next }
                key == "port" { p = $0 } key == "role-reported" && p == port { role = $0 }
                END { exit role != "slave" }' || return 1
    done
}

sentinels_view() { # what each sentinel names as the master, for messages
    local id addr
    for id in "${SENTINEL_IDS[@]}"; do
        addr=$(redis_cli "$id" SENTINEL get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null | tail -1)
        printf '%s names %s; ' "$id" "$( [[ -n $addr ]] && sentinel_id_of_port "$addr" || echo nothing)"
    done
}

sentinels_behind() { # ID: a majority of the sentinels names ID, some running one does not
    local id addr agree=0 behind=0
    for id in "${SENTINEL_IDS[@]}"; do
        owned_pid "$id" >/dev/null || continue
        addr=$(redis_cli "$id" SENTINEL get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null | tail -1)
        if [[ $addr == "$(client_port "$1")" ]]; then ((++agree)); else ((++behind)); fi
    done
    ((agree * 2 > ${#SENTINEL_IDS[@]} && behind > 0))
}

sentinels_repoint() { # ID: every running sentinel that names another master monitors ID instead
    local id addr
    for id in "${SENTINEL_IDS[@]}"; do
        owned_pid "$id" >/dev/null || continue
        addr=$(redis_cli "$id" SENTINEL get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null | tail -1)
        [[ $addr != "$(client_port "$1")" ]] || continue
        printf '%s\n' "SENTINEL REMOVE $SENTINEL_MASTER" \
            "SENTINEL MONITOR $SENTINEL_MASTER $(address "$1" | tr : ' ') 2" \
            "SENTINEL SET $SENTINEL_MASTER down-after-milliseconds 1000" \
            "SENTINEL SET $SENTINEL_MASTER failover-timeout 5000" \
            "SENTINEL SET $SENTINEL_MASTER parallel-syncs 1" | redis_cli "$id" >/dev/null || true
    done
}

sentinel_failover_done() { # OLD NEW
    [[ $(find_leader redis-sentinel) == "$2" ]] && sentinels_name "$2" || return 1
    ! sentinel_live "$1" || [[ $(sentinel_info "$1" master_link_status) == up ]]
}

sentinel_live() { # ID: running and not paused
    local pid
    pid=$(owned_pid "$1") && [[ $(proc_state "$pid") != T ]]
}

# After `heal ID` (netns mode): a data server cut off from the sentinels while they failed over
# still says role:master; they turn it into the new master's replica once they see it again.
# Wait for that (up to 30 s; after 10 s do it for them, as sentinel_mend does), and for its link.
redis_sentinel_healed() {
    local id=$1 master deadline=$((SECONDS + 30)) t0=$SECONDS
    sentinel_is_data "$id" || return 0
    while :; do
        master=$(sentinel_agreed_master)
        [[ $master != "$id" ]] || return 0
        [[ $(sentinel_info "$id" master_link_status) != up ]] || break
        ((SECONDS < deadline)) || die "heal: $id does not replicate $master after 30s ($(sentinels_view))"
        ((SECONDS - t0 < 10)) || sentinel_mend "$id" "$master"
        sleep 0.2
    done
    log "heal: $id replicates $master, the sentinels' master ($((SECONDS - t0))s)"
}

redis_sentinel_exports() {
    [[ $1 == cluster ]] || return 0
    emit LOCKSMITH_TEST_REDIS_SENTINEL "redis+sentinel://$(addresses "${SENTINEL_IDS[@]}")/$SENTINEL_MASTER"
}
