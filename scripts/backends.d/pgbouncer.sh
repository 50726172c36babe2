# shellcheck shell=bash
# scripts/backends.d/pgbouncer.sh — `pgbouncer`: PgBouncer in **session** pooling mode in front of
# the `postgres` server, for locksmith-postgres's tests of the mode its docs claim (transaction
# pooling cannot carry LISTEN, which the backend needs). A server kind for scripts/backends (the
# interface is described in lib.sh); loaded after postgres.sh, whose test user it serves.
#
# PgBouncer refuses to run as root, so when we are root it runs as the `postgres` user, like the
# server. Its auth file holds the throw-away test password of postgres.sh (loopback only).

register_ids pgbouncer single pgbouncer
need_command pgbouncer pgbouncer

pgbouncer_ports() { port 16432; }

pgbouncer_start() {
    local id=$1 dir="$STATE/$1"
    printf '"%s" "%s"\n' "$POSTGRES_TEST_USER" "$POSTGRES_TEST_PW" >"$dir/userlist.txt"
    cat >"$dir/pgbouncer.ini" <<EOF
[databases]
$POSTGRES_TEST_DB = host=$HOST port=$(client_port postgres) dbname=$POSTGRES_TEST_DB

[pgbouncer]
listen_addr = $HOST
listen_port = $(client_port "$id")
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/userlist.txt
pool_mode = session
; session pooling: one server connection per client connection while it is open; the tests open
; a few hundred at most (postgres.sh allows 400)
max_client_conn = 500
default_pool_size = 350
ignore_startup_parameters = extra_float_digits
EOF
    chmod 644 "$dir/pgbouncer.ini" "$dir/userlist.txt"
    launch "$id" "${POSTGRES_AS[@]}" pgbouncer "$dir/pgbouncer.ini"
}

pgbouncer_ready() { postgres_answers "$(client_port "$1")"; } # see postgres.sh

pgbouncer_exports() {
    [[ $1 == single ]] || return 0
    emit LOCKSMITH_TEST_PGBOUNCER \
        "postgres://$POSTGRES_TEST_USER:$POSTGRES_TEST_PW@$(address pgbouncer)/$POSTGRES_TEST_DB"
}
