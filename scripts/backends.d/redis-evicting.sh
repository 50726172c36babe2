# shellcheck shell=bash
# scripts/backends.d/redis-evicting.sh — `redis-evicting`: a single Redis that evicts keys when
# its memory runs out (`maxmemory 2mb`, `maxmemory-policy allkeys-lru`), as a cache is set up. A
# lock key on such a server can vanish while held, so locksmith refuses it at connect unless the
# URL says eviction=allow (backend-redis/tests/eviction.rs). A server kind for scripts/backends
# (the interface is described in lib.sh); loaded after redis.sh, whose config lines, readiness
# check and settle wait it shares.

register_ids redis-evicting single redis-evicting
need_command redis-server redis-server
need_command redis-cli redis-tools

redis_evicting_ports() { port 16394; }

redis_evicting_start() { redis_start "$1" "maxmemory 2mb" "maxmemory-policy allkeys-lru"; }

redis_evicting_ready() { redis_ready "$1"; }

redis_evicting_settle() { redis_settle "$1"; } # see redis.sh: the opt-out test takes a lock

redis_evicting_exports() {
    [[ $1 == single ]] || return 0
    emit LOCKSMITH_TEST_REDIS_EVICTING "redis://$(address redis-evicting)"
}
