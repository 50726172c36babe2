# shellcheck shell=bash disable=SC2153 # ETCD_HEARTBEAT_MS ... are set in etcd.sh
# scripts/backends.d/etcd-secure.sh — `etcd-secure`: a single etcd with TLS, client
# certificates (mutual TLS) and authentication (users, roles), for the tests of secured
# connections. A server kind for scripts/backends (the interface is described in lib.sh);
# loaded after etcd.sh, whose heartbeat and election settings it shares.
#
# THROW-AWAY TEST SECRETS (a loopback server that holds nothing; never use them elsewhere):
#   user root       password root-pass-123   (etcd's superuser; needed to enable auth)
#   user locksmith  password lock-pass-123   role locksmith: readwrite on every key
# Clients must present a certificate signed by $STATE/tls/ca.pem (tls.sh). etcd takes the
# certificate's CN as the user when a request carries no token: client.pem (CN=locksmith) alone
# is thus user locksmith; a user and password, when given, must be right.
# Users, roles and "auth enabled" are kept in the data dir: set up on the first start, they
# survive `stop`/`start`. Tokens are etcd's default "simple" ones, which a restart invalidates
# (clients authenticate again).

register_ids etcd-secure single etcd-secure
need_command etcd etcd-server
need_command etcdctl etcd-client

readonly ETCD_SECURE_ROOT_PASSWORD=root-pass-123
readonly ETCD_SECURE_USER=locksmith ETCD_SECURE_PASSWORD=lock-pass-123

etcd_secure_ports() { # client 23794, peer 23804
    port 23794
    port 23804
}

etcd_secure_start() {
    local id=$1
    tls_ensure
    # The peer URL stays plain http: there are no peers (a single member on loopback).
    etcd_launch_alone "$id" etcd-secure https "$HOST" "$(port 23794)" "$(port 23804)" locksmith-secure \
        --cert-file "$TLS_DIR/server.pem" \
        --key-file "$TLS_DIR/server.key" \
        --client-cert-auth \
        --trusted-ca-file "$TLS_DIR/ca.pem"
}

etcd_secure_ctl() { # etcdctl over TLS with our client certificate, short timeouts
    ETCDCTL_API=3 timeout 10 etcdctl --endpoints="https://$HOST:$(port 23794)" \
        --cacert "$TLS_DIR/ca.pem" --cert "$TLS_DIR/client.pem" --key "$TLS_DIR/client.key" \
        --dial-timeout=1s --command-timeout=3s "$@"
}

# Is authentication on? Then our certificate alone is user locksmith, whom etcd denies this
# superuser's request; with it off, anyone may make it. (Not a root login: etcdctl logs in, then
# goes on without a token when etcd answers "authentication is not enabled".)
etcd_secure_auth_on() {
    local out
    out=$(etcd_secure_ctl user get root 2>&1) && return 1
    [[ $out == *"permission denied"* ]]
}

# One change of the setup below. "already exists": made by an earlier, interrupted setup.
etcd_secure_step() {
    local out
    out=$(etcd_secure_ctl "$@" 2>&1) && return 0
    [[ $out == *"already exists"* ]] && return 0
    log "etcd-secure: etcdctl $1 $2 failed: $out"
    return 1
}

# The users and roles of the header, then `auth enable` (which also gives root the root role).
etcd_secure_setup_auth() {
    log "etcd-secure: authentication is off (a first start): adding users root and $ETCD_SECURE_USER, enabling it"
    etcd_secure_step user add root --new-user-password "$ETCD_SECURE_ROOT_PASSWORD" &&
        etcd_secure_step role add locksmith &&
        etcd_secure_step role grant-permission locksmith readwrite --prefix=true '' &&
        etcd_secure_step user add "$ETCD_SECURE_USER" --new-user-password "$ETCD_SECURE_PASSWORD" &&
        etcd_secure_step user grant-role "$ETCD_SECURE_USER" locksmith &&
        etcd_secure_step auth enable &&
        etcd_secure_auth_on
}

# Answers over TLS with our client certificate, and authentication is on. It is set up here when
# it is off: on the first start (or after a first start cut short before the setup ended); a
# `check` that finds it on, as it always does afterwards, changes nothing.
etcd_secure_ready() {
    port_open "$(port 23794)" &&
        etcd_secure_ctl endpoint health >/dev/null 2>&1 &&
        { etcd_secure_auth_on || etcd_secure_setup_auth; }
}

etcd_secure_exports() {
    [[ $1 == single ]] || return 0
    tls_exports
    emit_quoted LOCKSMITH_TEST_ETCD_SECURE \
        "$(tls_url etcds "$ETCD_SECURE_USER" "$ETCD_SECURE_PASSWORD" "$(address etcd-secure)")"
}
