# shellcheck shell=bash
# scripts/backends.d/redis.sh — Redis: a single server `redis`, 3 independent masters
# `redis-q1..3` (no replication: the Redlock quorum), and `register`, the fault suite's fenced
# register (a store of its own, which no fault touches: see chaos/src/register.rs). A server kind for scripts/backends (the
# interface is described in lib.sh).

register_ids redis single redis register
register_ids redis cluster redis-q1 redis-q2 redis-q3
clock_ids redis redis-q1 redis-q2 redis-q3
need_command redis-server redis-server
need_command redis-cli redis-tools

redis_ports() { # 16379 (+member); the fault suite's fenced register 16390
    local n
    [[ $1 != register ]] || {
        port 16390
        return
    }
    n=$(member_of "$1")
    port $((16379 + ${n:-0}))
}

# Protected mode (no password: loopback clients only) on 127.0.0.1; off on a netns address, which
# only this machine reaches (a private bridge), but not over loopback.
redis_protected_mode() { # ID
    if [[ $(host_of "$1") == "$HOST" ]]; then echo "protected-mode yes"; else echo "protected-mode no"; fi
}

# The config lines every Redis of ours has (redis-secure.sh adds its TLS and users to them).
redis_base_conf() { # ID
    local dir="$STATE/$1"
    cat <<EOF
# written by scripts/backends for server '$1'
bind $(host_of "$1")
$(redis_protected_mode "$1")
# run in the foreground: scripts/backends puts it in the background and records its pid
daemonize no
# no persistence: a restart is an empty server
save ""
appendonly no
dir $dir/data
# log to stdout = $dir/server.log
logfile ""
# keep the full command line (with this file's path): it is how we recognise our process
set-proc-title no
# replication (redis-sentinel.sh, redis-cluster.sh): a full sync starts at once (not 5 s
# later, waiting for more replicas), and the replica deletes its RDB file once loaded
repl-diskless-sync-delay 0
rdb-del-sync-files yes
EOF
}

# ID [LINE...]: the extra config lines of redis-sentinel.sh and redis-cluster.sh
redis_start() {
    local id=$1 dir="$STATE/$1"
    mkdir -p "$dir/data"
    rm -f "$dir/data/dump.rdb" # a replica killed before it deleted it: a restart is empty
    {
        redis_base_conf "$id"
        echo "port $(client_port "$id")"
        (($# < 2)) || printf "%s\n" "${@:2}"
    } >"$dir/redis.conf"
    launch "$id" redis-server "$dir/redis.conf"
}

redis_cli() { timeout 3 redis-cli -h "$(host_of "$1")" -p "$(client_port "$1")" "${@:2}"; } # ID ARGS...

redis_ready() {
    [[ $(redis_cli "$1" ping 2>/dev/null) == PONG ]]
}

# A Redis that started less than locksmith's restart_delay ago (15 s by default) may have lost
# locks held before (a restart without persistence), so locksmith grants no lock that has no
# fencing counter on it until then (see locksmith-redis's docs, "After data loss"). A server that
# `up` started fresh has lost nothing: wait out that delay here, once, so that tests started right
# after `up` do not stall on it. (`start ID`, the restart of the fault tests, does not wait.)
readonly REDIS_SETTLE_SECS=${LOCKSMITH_REDIS_SETTLE_SECS:-15}

# ID [CLI]: seconds since ID started, from INFO; CLI runs redis-cli for ID (default redis_cli;
# redis-secure.sh passes its own).
redis_uptime() {
    "${2:-redis_cli}" "$1" info server 2>/dev/null |
        sed -n 's/^uptime_in_seconds:\([0-9]*\).*/\1/p'
}

redis_settle() { # ID [CLI]
    local up
    [[ $1 != register ]] || return 0 # holds no locks
    up=$(redis_uptime "$1" "${2:-}")
    up=${up:-0}
    if ((up < REDIS_SETTLE_SECS)); then
        log "$1: waiting $((REDIS_SETTLE_SECS - up))s until it has been up for locksmith's restart_delay (${REDIS_SETTLE_SECS}s)"
        sleep $((REDIS_SETTLE_SECS - up))
    fi
}

redis_exports() {
    case $1 in
    single)
        emit LOCKSMITH_TEST_REDIS "redis://$(address redis)"
        emit LOCKSMITH_TEST_REGISTER "redis://$(address register)"
        ;;
    cluster) emit LOCKSMITH_TEST_REDIS_QUORUM "redis://$(addresses redis-q1 redis-q2 redis-q3)" ;;
    esac
}
