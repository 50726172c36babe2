# shellcheck shell=bash
# scripts/backends.d/postgres-secure.sh — `postgres-secure`: a PostgreSQL cluster of its own that
# accepts only TLS connections with a password (scram-sha-256) AND a client certificate signed by
# the test CA (tls.sh), for locksmith-postgres's tests of secured connections. A server kind for
# scripts/backends (the interface is described in lib.sh); loaded after postgres.sh, whose
# helpers, users and throw-away passwords it shares.

register_ids postgres-secure single postgres-secure

postgres_secure_ports() { port 15433; }

postgres_secure_start() {
    local id=$1 dir="$STATE/$1" bin
    bin=$(postgres_bin) || die "postgres-secure: no server in /usr/lib/postgresql/*/bin"
    [[ -f $dir/initialized ]] || {
        rm -rf "$dir/data" "$dir/run"
        postgres_init "$dir" "$bin"
    }
    tls_ensure
    # The server reads its key as its own user, and refuses a key others can read.
    mkdir -p "$dir/tls"
    cp "$TLS_DIR/server.pem" "$TLS_DIR/server.key" "$TLS_DIR/ca.pem" "$dir/tls/"
    # TLS only, a password and a client certificate of our CA; no plain `host` line.
    cat >"$dir/tls/pg_hba.conf" <<EOF
local all all peer
hostssl all all $HOST/32 scram-sha-256 clientcert=verify-ca
EOF
    if ((EUID == 0)); then chown -R postgres:postgres "$dir/tls"; fi
    chmod 600 "$dir/tls/server.key"
    launch "$id" "${POSTGRES_AS[@]}" "$bin/postgres" -D "$dir/data" \
        -c listen_addresses="$HOST" -c port="$(client_port "$id")" \
        -c unix_socket_directories="$dir/run" -c max_connections=200 \
        -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c autovacuum=off \
        -c ssl=on -c ssl_cert_file="$dir/tls/server.pem" -c ssl_key_file="$dir/tls/server.key" \
        -c ssl_ca_file="$dir/tls/ca.pem" -c hba_file="$dir/tls/pg_hba.conf"
}

postgres_secure_stop_signal() { echo INT; } # see postgres.sh
postgres_secure_helpers() { postgres_ha_helpers "$@"; } # see postgres.sh
postgres_secure_lock_files() { postgres_lock_files "$@"; } # see postgres.sh

postgres_secure_ready() {
    local bin
    bin=$(postgres_bin) || return 1
    PGPASSWORD=$POSTGRES_TEST_PW timeout 3 "$bin/psql" -X -q -t -A -w \
        "host=$HOST port=$(client_port "$1") user=$POSTGRES_TEST_USER dbname=$POSTGRES_TEST_DB sslmode=verify-full sslrootcert=$TLS_DIR/ca.pem sslcert=$TLS_DIR/client.pem sslkey=$TLS_DIR/client.key" \
        -c 'select 1' 2>/dev/null | grep -qx 1
}

postgres_secure_exports() {
    [[ $1 == single ]] || return 0
    local dir
    dir=$(url_escape "$TLS_DIR")
    tls_exports
    emit_quoted LOCKSMITH_TEST_POSTGRES_SECURE \
        "postgres://$POSTGRES_TEST_USER:$POSTGRES_TEST_PW@$(address postgres-secure)/$POSTGRES_TEST_DB?sslmode=verify-full&ca=$dir/ca.pem&cert=$dir/client.pem&key=$dir/client.key"
}
