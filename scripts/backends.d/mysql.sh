# shellcheck shell=bash
# scripts/backends.d/mysql.sh — MySQL: one MariaDB server `mysql` (`up single` and `up all`) for
# locksmith-mysql's tests. A server kind for scripts/backends (the interface is described in
# lib.sh).
#
# Debian's MariaDB (10.11 on Debian 12, package mariadb-server), its own data directory
# (mariadb-install-db) in $STATE/mysql/data, on 127.0.0.1:13306 (+offset) only, never 3306; its
# Unix socket and pid file are in $STATE/mysql/run (not /run/mysqld). The server is not run as
# root: when we are root it runs as the `mysql` user that the Debian package creates (setpriv
# execs it: the pid that `launch` records is mariadbd's own), and that user owns
# $STATE/mysql/{data,run}. A restart (`start mysql`) keeps the data: the fencing counters stored
# in the tables survive it, as in production.
#
# Throw-away test secrets (the server listens on loopback only):
#   root       unix_socket authentication on $STATE/mysql/run/mysqld.sock only
#   test user  locksmith / locksmith-test-pw (mysql_native_password), every right on the
#              database `locksmith` and on databases named locksmith_* (the tests' throw-away
#              namespaces); no global right (a user may KILL its own threads without one)
# The user and database are made by an init file the server runs at each start (idempotent).

register_ids mysql single mysql
need_check mysql_have_server mariadb-server "the MariaDB server (mariadbd)"
need_command mariadb mariadb-client

readonly MYSQL_TEST_USER=locksmith MYSQL_TEST_PW=locksmith-test-pw MYSQL_TEST_DB=locksmith

mysql_bin() { # the server binary: mariadbd, or mysqld on older packages
    local b
    for b in /usr/sbin/mariadbd /usr/sbin/mysqld; do
        [[ -x $b ]] && {
            echo "$b"
            return 0
        }
    done
    return 1
}

mysql_have_server() { mysql_bin >/dev/null && command -v mariadb-install-db >/dev/null; }

mysql_ports() { port 13306; }

# The prefix that runs a command as the server's user: `mysql` when we are root, else nothing.
MYSQL_AS=()
((EUID != 0)) || MYSQL_AS=(setpriv --reuid=mysql --regid=mysql --init-groups --)

# The redo log's size, at initialisation and at every start: 32 MiB, not the default 96, on
# four test servers (the disk of a CI machine may be nearly full).
readonly MYSQL_REDO_LOG=(--innodb-log-file-size=32M)

# First start only: the system tables. A second try, from an empty directory again, if the first
# fails (a CI run once saw it fail once, cause unknown; die prints the log's end).
mysql_init() { # DIR
    local dir=$1 try
    for try in 1 2; do
        rm -rf "$dir/data"
        mkdir -p "$dir/data" "$dir/run"
        if ((EUID == 0)); then chown -R mysql:mysql "$dir/data" "$dir/run"; fi
        chmod 700 "$dir/data"
        if "${MYSQL_AS[@]}" mariadb-install-db --no-defaults --datadir="$dir/data" \
            "${MYSQL_REDO_LOG[@]}" --auth-root-authentication-method=socket --skip-test-db \
            >>"$dir/server.log" 2>&1; then
            touch "$dir/initialized"
            return 0
        fi
        ((try == 2)) || log "mysql: mariadb-install-db failed in $dir, once: again"
    done
    die "mysql: mariadb-install-db failed twice (see $dir/server.log)"
}

mysql_start() {
    local id=$1 dir="$STATE/$1" bin
    bin=$(mysql_bin) || die "mysql: no server (/usr/sbin/mariadbd)"
    [[ -f $dir/initialized ]] || {
        rm -rf "$dir/run" # mysql_init empties data/
        mysql_init "$dir"
    }
    mkdir -p "$dir/run"
    if ((EUID == 0)); then chown mysql:mysql "$dir/run"; fi
    cat >"$dir/init.sql" <<EOF
CREATE DATABASE IF NOT EXISTS $MYSQL_TEST_DB;
CREATE USER IF NOT EXISTS '$MYSQL_TEST_USER'@'%' IDENTIFIED BY '$MYSQL_TEST_PW';
GRANT ALL PRIVILEGES ON \`$MYSQL_TEST_DB\`.* TO '$MYSQL_TEST_USER'@'%';
GRANT ALL PRIVILEGES ON \`${MYSQL_TEST_DB}\\_%\`.* TO '$MYSQL_TEST_USER'@'%';
EOF
    chmod 644 "$dir/init.sql"
    # --datadir carries "$STATE/mysql/": how we recognise our process. 1,000 connections: the
    # tests open a locker (a few connections) per harness, many at once. No binary log, lazy
    # flushes: a test server (a restart is a clean shutdown, which loses nothing).
    launch "$id" "${MYSQL_AS[@]}" "$bin" --no-defaults --datadir="$dir/data" \
        --socket="$dir/run/mysqld.sock" --pid-file="$dir/run/mariadbd.pid" \
        --bind-address="$(host_of "$id")" --port="$(client_port "$id")" \
        --init-file="$dir/init.sql" --skip-name-resolve --max-connections=1000 \
        --innodb-flush-log-at-trx-commit=2 "${MYSQL_REDO_LOG[@]}" --skip-log-bin \
        --log-error="$dir/mariadbd.err"
}

# The pid file mariadbd leaves when it is killed.
mysql_lock_files() { echo "$STATE/$1/run/mariadbd.pid"; }

# Whether the test user's `select 1` is answered on PORT.
mysql_answers() { # PORT
    timeout 3 mariadb --no-defaults -h "$HOST" -P "$1" -u "$MYSQL_TEST_USER" \
        -p"$MYSQL_TEST_PW" -N -B -e 'select 1' "$MYSQL_TEST_DB" 2>/dev/null | grep -qx 1
}

mysql_ready() { mysql_answers "$(client_port "$1")"; }

mysql_exports() {
    [[ $1 == single ]] || return 0
    emit LOCKSMITH_TEST_MYSQL \
        "mysql://$MYSQL_TEST_USER:$MYSQL_TEST_PW@$(address mysql)/$MYSQL_TEST_DB"
}
