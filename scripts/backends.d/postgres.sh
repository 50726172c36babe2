# shellcheck shell=bash
# scripts/backends.d/postgres.sh — PostgreSQL: one server `postgres` (`up single` and `up all`)
# for locksmith-postgres's tests. A server kind for scripts/backends (the interface is described
# in lib.sh).
#
# Its own cluster (initdb) in $STATE/postgres/data, on 127.0.0.1:15432 (+offset) only; its Unix
# socket is in $STATE/postgres/run (not /var/run/postgresql). The server refuses to run as
# root, so when we are root it runs as the `postgres` user that the Debian package creates
# (setpriv execs it: the pid that `launch` records is the postmaster's own), and that user owns
# $STATE/postgres/{data,run}. Unlike our Redis, a restart (`start postgres`) keeps the data:
# the fencing tokens stored in the tables survive it, as in production.
#
# Throw-away test secrets (the server listens on loopback only):
#   superuser  postgres / locksmith-admin-pw   (scram-sha-256 over TCP; peer on the socket)
#   test user  locksmith / locksmith-test-pw, owner of the database `locksmith` (not a superuser)
#   app user   locksmith_app / locksmith-app-pw: no rights of its own (the least-privilege test
#              grants it what `locksmith init --sql --grant` prints)
#   few user   locksmith_few / locksmith-few-pw: a member of locksmith (its rights) allowed 3
#              connections (CONNECTION LIMIT 3): the connection-limit test reaches that limit
#              instead of the server's max_connections, which every other test shares

register_ids postgres single postgres
need_check postgres_have_server postgresql "the PostgreSQL server (/usr/lib/postgresql/*/bin/postgres)"

readonly POSTGRES_ADMIN_PW=locksmith-admin-pw
readonly POSTGRES_TEST_USER=locksmith POSTGRES_TEST_PW=locksmith-test-pw POSTGRES_TEST_DB=locksmith
readonly POSTGRES_APP_USER=locksmith_app POSTGRES_APP_PW=locksmith-app-pw
readonly POSTGRES_FEW_USER=locksmith_few POSTGRES_FEW_PW=locksmith-few-pw

# The newest installed server's bin directory (Debian: /usr/lib/postgresql/VERSION/bin).
postgres_bin() {
    local d best=
    for d in /usr/lib/postgresql/*/bin; do
        [[ -x $d/postgres ]] || continue
        if [[ -z $best ]] || [[ $(printf '%s\n%s\n' "$best" "$d" | sort -V | tail -n 1) == "$d" ]]; then
            best=$d
        fi
    done
    [[ -n $best ]] || return 1
    echo "$best"
}

postgres_have_server() { postgres_bin >/dev/null; }

# psql: backend-postgres/tests/advisory.rs holds advisory locks from psql sessions.
need_command psql postgresql-client

postgres_ports() { port 15432; }

# The prefix that runs a command as the server's user: `postgres` when we are root (the server,
# and PgBouncer, refuse to run as root), else nothing (ourselves). setpriv execs: the pid that
# `launch` records is the server's own.
POSTGRES_AS=()
((EUID != 0)) || POSTGRES_AS=(setpriv --reuid=postgres --regid=postgres --init-groups --)

# Run a command as the server's user.
postgres_as() { "${POSTGRES_AS[@]}" "$@"; }

# First start only: initdb, then (single-user mode, before the server listens) the test user
# and database.
postgres_init() { # DIR BIN
    local dir=$1 bin=$2 pwfile
    mkdir -p "$dir/data" "$dir/run"
    pwfile="$dir/run/admin-pw"
    printf '%s\n' "$POSTGRES_ADMIN_PW" >"$pwfile"
    if ((EUID == 0)); then chown -R postgres:postgres "$dir/data" "$dir/run"; fi
    chmod 700 "$dir/data"
    postgres_as "$bin/initdb" -D "$dir/data" -U postgres --pwfile="$pwfile" \
        --auth-local=peer --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 \
        >>"$dir/server.log" 2>&1 || die "postgres: initdb failed (see $dir/server.log)"
    rm -f "$pwfile"
    postgres_as "$bin/postgres" --single -D "$dir/data" postgres >>"$dir/server.log" 2>&1 <<EOF ||
CREATE ROLE $POSTGRES_TEST_USER LOGIN PASSWORD '$POSTGRES_TEST_PW'
CREATE DATABASE $POSTGRES_TEST_DB OWNER $POSTGRES_TEST_USER
CREATE ROLE $POSTGRES_APP_USER LOGIN PASSWORD '$POSTGRES_APP_PW'
EOF
        die "postgres: creating the test user and database failed (see $dir/server.log)"
    touch "$dir/initialized"
}

# Once per cluster (a cluster made before this step gets it at its next start): the
# `pg_stat_statements` view in the test database, which lockbench's request counts read (its
# library is loaded by the server's start command).
postgres_add_statement_counts() { # DIR BIN
    local dir=$1 bin=$2
    [[ -f $dir/statement-counts ]] && return 0
    postgres_as "$bin/postgres" --single -D "$dir/data" "$POSTGRES_TEST_DB" >>"$dir/server.log" 2>&1 <<EOF ||
CREATE EXTENSION IF NOT EXISTS pg_stat_statements
EOF
        die "postgres: creating pg_stat_statements failed (see $dir/server.log)"
    touch "$dir/statement-counts"
}

# Once per cluster (as above): the role with a connection limit of its own (tests/connections.rs).
postgres_add_few_role() { # DIR BIN
    local dir=$1 bin=$2
    [[ -f $dir/few-role ]] && return 0
    postgres_as "$bin/postgres" --single -D "$dir/data" postgres >>"$dir/server.log" 2>&1 <<EOF ||
CREATE ROLE $POSTGRES_FEW_USER LOGIN PASSWORD '$POSTGRES_FEW_PW' CONNECTION LIMIT 3 IN ROLE $POSTGRES_TEST_USER
EOF
        die "postgres: creating the role $POSTGRES_FEW_USER failed (see $dir/server.log)"
    touch "$dir/few-role"
}

postgres_start() {
    local id=$1 dir="$STATE/$1" bin
    bin=$(postgres_bin) || die "postgres: no server in /usr/lib/postgresql/*/bin"
    [[ -f $dir/initialized ]] || {
        rm -rf "$dir/data" "$dir/run" "$dir/statement-counts"
        postgres_init "$dir" "$bin"
    }
    postgres_add_statement_counts "$dir" "$bin"
    postgres_add_few_role "$dir" "$bin"
    # -D "$dir/data" carries "$STATE/postgres/": how we recognise our process. 500 connections:
    # the fault suite's load test gives each of its 100 waiters a locker of its own (three
    # connections each; 1,000 waiters in 10 processes need 30, see tests/processes.rs). No
    # autovacuum: the tests' throw-away schemas need none, and its ANALYZEs take transaction ids,
    # which tests/herd.rs counts. pg_stat_statements: lockbench counts the statements executed
    # (the herd's requests per hand-over, the renewal traffic), as many production servers have
    # it; room for 10,000 statements, so the tests' throw-away schemas rarely push one out.
    launch "$id" "${POSTGRES_AS[@]}" "$bin/postgres" -D "$dir/data" \
        -c listen_addresses="$HOST" -c port="$(client_port "$id")" \
        -c unix_socket_directories="$dir/run" -c max_connections=500 \
        -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.max=10000 \
        -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c autovacuum=off
}

# SIGINT is PostgreSQL's fast shutdown (clients are disconnected, the data is kept); its SIGTERM
# waits for every client to leave, which locksmith's connections never do by themselves.
postgres_stop_signal() { echo INT; }

# `pause` and `resume` signal the postmaster's children with it (postgres-ha.sh's list from
# /proc): a session's backend process serves its client on its own, so stopping the postmaster
# alone left every open connection answered, and no pause to be seen.
postgres_helpers() { postgres_ha_helpers "$@"; }

# The postmaster's lock files, of its data directory and of its socket, which a killed postmaster
# leaves (see clear_stale_lock_files).
postgres_lock_files() { # ID
    echo "$STATE/$1/data/postmaster.pid" "$STATE/$1/run/.s.PGSQL.$(client_port "$1").lock"
}

# Whether the test user's `select 1` is answered on PORT (the server, or a pooler in front of it).
postgres_answers() { # PORT
    local bin
    bin=$(postgres_bin) || return 1
    PGPASSWORD=$POSTGRES_TEST_PW timeout 3 "$bin/psql" -X -q -t -A -w \
        -h "$HOST" -p "$1" -U "$POSTGRES_TEST_USER" -d "$POSTGRES_TEST_DB" \
        -c 'select 1' 2>/dev/null | grep -qx 1
}

postgres_ready() { postgres_answers "$(client_port "$1")"; }

postgres_exports() {
    [[ $1 == single ]] || return 0
    emit LOCKSMITH_TEST_POSTGRES \
        "postgres://$POSTGRES_TEST_USER:$POSTGRES_TEST_PW@$(address postgres)/$POSTGRES_TEST_DB"
    emit LOCKSMITH_TEST_POSTGRES_APP \
        "postgres://$POSTGRES_APP_USER:$POSTGRES_APP_PW@$(address postgres)/$POSTGRES_TEST_DB"
    emit LOCKSMITH_TEST_POSTGRES_FEW \
        "postgres://$POSTGRES_FEW_USER:$POSTGRES_FEW_PW@$(address postgres)/$POSTGRES_TEST_DB"
    # The superuser, for what only it may do (tests/full_disk.rs creates a tablespace).
    emit LOCKSMITH_TEST_POSTGRES_ADMIN \
        "postgres://postgres:$POSTGRES_ADMIN_PW@$(address postgres)/$POSTGRES_TEST_DB"
}
