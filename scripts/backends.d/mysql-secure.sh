# shellcheck shell=bash
# scripts/backends.d/mysql-secure.sh — `mysql-secure`: a MariaDB of its own that accepts only TLS
# connections (require_secure_transport), with a password AND a client certificate signed by the
# test CA (tls.sh) for the test user (REQUIRE X509), for locksmith-mysql's tests of secured
# connections. A server kind for scripts/backends (the interface is described in lib.sh); loaded
# after mysql.sh, whose helpers, user and throw-away password it shares.

register_ids mysql-secure single mysql-secure

mysql_secure_ports() { port 13307; }

mysql_secure_start() {
    local id=$1 dir="$STATE/$1" bin
    bin=$(mysql_bin) || die "mysql-secure: no server (/usr/sbin/mariadbd)"
    [[ -f $dir/initialized ]] || {
        rm -rf "$dir/run" # mysql_init empties data/
        mysql_init "$dir"
    }
    tls_ensure
    mkdir -p "$dir/run" "$dir/tls"
    cp "$TLS_DIR/server.pem" "$TLS_DIR/server.key" "$TLS_DIR/ca.pem" "$dir/tls/"
    chmod 600 "$dir/tls/server.key"
    if ((EUID == 0)); then chown -R mysql:mysql "$dir/run" "$dir/tls"; fi
    cat >"$dir/init.sql" <<EOF
CREATE DATABASE IF NOT EXISTS $MYSQL_TEST_DB;
CREATE USER IF NOT EXISTS '$MYSQL_TEST_USER'@'%' IDENTIFIED BY '$MYSQL_TEST_PW' REQUIRE X509;
GRANT ALL PRIVILEGES ON \`$MYSQL_TEST_DB\`.* TO '$MYSQL_TEST_USER'@'%';
GRANT ALL PRIVILEGES ON \`${MYSQL_TEST_DB}\\_%\`.* TO '$MYSQL_TEST_USER'@'%';
EOF
    chmod 644 "$dir/init.sql"
    launch "$id" "${MYSQL_AS[@]}" "$bin" --no-defaults --datadir="$dir/data" \
        --socket="$dir/run/mysqld.sock" --pid-file="$dir/run/mariadbd.pid" \
        --bind-address="$(host_of "$id")" --port="$(client_port "$id")" \
        --init-file="$dir/init.sql" --skip-name-resolve --max-connections=200 \
        --innodb-flush-log-at-trx-commit=2 "${MYSQL_REDO_LOG[@]}" --skip-log-bin \
        --log-error="$dir/mariadbd.err" \
        --ssl-cert="$dir/tls/server.pem" --ssl-key="$dir/tls/server.key" \
        --ssl-ca="$dir/tls/ca.pem" --require-secure-transport=ON
}

mysql_secure_lock_files() { mysql_lock_files "$@"; } # see mysql.sh

mysql_secure_ready() {
    timeout 3 mariadb --no-defaults -h "$HOST" -P "$(client_port "$1")" -u "$MYSQL_TEST_USER" \
        -p"$MYSQL_TEST_PW" --ssl --ssl-verify-server-cert --ssl-ca="$TLS_DIR/ca.pem" \
        --ssl-cert="$TLS_DIR/client.pem" --ssl-key="$TLS_DIR/client.key" \
        -N -B -e 'select 1' "$MYSQL_TEST_DB" 2>/dev/null | grep -qx 1
}

mysql_secure_exports() {
    [[ $1 == single ]] || return 0
    local dir
    dir=$(url_escape "$TLS_DIR")
    tls_exports
    emit_quoted LOCKSMITH_TEST_MYSQL_SECURE \
        "mysql://$MYSQL_TEST_USER:$MYSQL_TEST_PW@$(address mysql-secure)/$MYSQL_TEST_DB?ssl_mode=verify_identity&ca=$dir/ca.pem&cert=$dir/client.pem&key=$dir/client.key"
}
