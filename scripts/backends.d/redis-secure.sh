# shellcheck shell=bash
# scripts/backends.d/redis-secure.sh — `redis-secure`: a single Redis reachable only over TLS,
# with client certificates (mutual TLS) and ACL users, for the tests of secured connections.
# A server kind for scripts/backends (the interface is described in lib.sh); loaded after
# redis.sh, whose config lines and settle wait it shares.
#
# THROW-AWAY TEST SECRETS (a loopback server that holds nothing; never use them elsewhere):
#   user default    password default-pass-123  all commands and keys (password-only AUTH)
#   user locksmith  password lock-pass-123     ~* &* +@all
#   user readonly   password read-pass-123     ~* &* +@read (cannot write; nor PING, SCRIPT
#                                              LOAD ...: those are not @read)
# Clients must also present a certificate signed by $STATE/tls/ca.pem (tls.sh). The users are
# in redis.conf, so a restart (no persistence: an empty server) has them again.

register_ids redis-secure single redis-secure
need_command redis-server redis-server
need_command redis-cli redis-tools

readonly REDIS_SECURE_USER=locksmith REDIS_SECURE_PASSWORD=lock-pass-123

redis_secure_ports() { port 16391; } # TLS only (`port 0`: no plaintext port)

redis_secure_start() {
    local id=$1 dir="$STATE/$1"
    mkdir -p "$dir/data"
    tls_ensure
    {
        redis_base_conf "$id"
        cat <<EOF
port 0
tls-port $(port 16391)
tls-cert-file $TLS_DIR/server.pem
tls-key-file $TLS_DIR/server.key
tls-ca-cert-file $TLS_DIR/ca.pem
tls-auth-clients yes
# ACL users (throw-away test secrets, see scripts/backends.d/redis-secure.sh)
user default on >default-pass-123 ~* &* +@all
user $REDIS_SECURE_USER on >$REDIS_SECURE_PASSWORD ~* &* +@all
user readonly on >read-pass-123 ~* &* +@read
EOF
    } >"$dir/redis.conf"
    launch "$id" redis-server "$dir/redis.conf"
}

redis_secure_cli() { # ID ARGS...: redis-cli over TLS, with our client certificate, as locksmith
    timeout 3 redis-cli --tls --cacert "$TLS_DIR/ca.pem" \
        --cert "$TLS_DIR/client.pem" --key "$TLS_DIR/client.key" \
        -h "$HOST" -p "$(client_port "$1")" \
        --user "$REDIS_SECURE_USER" --pass "$REDIS_SECURE_PASSWORD" --no-auth-warning "${@:2}"
}

redis_secure_ready() { [[ $(redis_secure_cli "$1" ping 2>/dev/null) == PONG ]]; }

redis_secure_settle() { redis_settle "$1" redis_secure_cli; } # see redis.sh

redis_secure_exports() {
    [[ $1 == single ]] || return 0
    tls_exports
    emit_quoted LOCKSMITH_TEST_REDIS_SECURE \
        "$(tls_url rediss "$REDIS_SECURE_USER" "$REDIS_SECURE_PASSWORD" "$(address redis-secure)")"
}
