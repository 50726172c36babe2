# shellcheck shell=bash
# scripts/backends.d/pgbouncer.sh — PgBouncer in front of the `postgres` server, for
# locksmith-postgres's tests of both pooling modes production runs: `pgbouncer` in **session**
# pooling mode, `pgbouncer-txn` in **transaction** pooling mode (a server session per transaction:
# named prepared statements, session settings and LISTEN do not survive from one transaction to
# the next; locksmith then takes `listen=` for its LISTEN connection). A server kind for
# scripts/backends (the interface is described in lib.sh); loaded after postgres.sh, whose test
# user it serves.
#
# PgBouncer refuses to run as root, so when we are root it runs as the `postgres` user, like the
# server. Its auth file holds the throw-away test password of postgres.sh (loopback only).

register_ids pgbouncer single pgbouncer pgbouncer-txn
need_command pgbouncer pgbouncer

pgbouncer_ports() { # 16432 session mode, 16433 transaction mode
    case $1 in
    pgbouncer-txn) port 16433 ;;
    *) port 16432 ;;
    esac
}

pgbouncer_start() {
    local id=$1 dir="$STATE/$1" mode=session
    [[ $id != pgbouncer-txn ]] || mode=transaction
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
pool_mode = $mode
; session pooling: one server connection per client connection while it is open; the tests open
; a few hundred at most (postgres.sh allows 500, shared by both poolers and the direct clients).
; Transaction pooling: a server connection per transaction in flight, at most 20 (the size of a
; production pool; what the clients beyond wait for is PgBouncer's queue).
max_client_conn = 500
default_pool_size = $([[ $mode == session ]] && echo 350 || echo 20)
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
    emit LOCKSMITH_TEST_PGBOUNCER_TXN \
        "postgres://$POSTGRES_TEST_USER:$POSTGRES_TEST_PW@$(address pgbouncer-txn)/$POSTGRES_TEST_DB"
}
