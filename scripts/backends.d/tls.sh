# shellcheck shell=bash
# scripts/backends.d/tls.sh — the throw-away certificate authority of the secure servers
# (etcd-secure, zk-secure, redis-secure) and the URLs that name its files. Sourced by lib.sh.
#
# $STATE/tls/ is made once per state directory, by the first secure server that starts (under
# the state directory's lock), and reused by the others and by every later start; made anew only
# when a file is missing or a certificate expires within the hour. Everything is EC P-256, keys
# are PEM PKCS#8 ("BEGIN PRIVATE KEY", mode 0600), certificates valid $TLS_DAYS days:
#   ca.pem, ca.key                the CA that the servers and the clients trust
#   server.pem, server.key        every secure server's certificate: SAN IP:127.0.0.1,
#                                 DNS:localhost; EKU serverAuth + clientAuth
#   server.keystore.pem           server.key + server.pem (ZooKeeper's PEM key store)
#   client.pem, client.key        the client certificate: CN=locksmith, EKU clientAuth
#   other-ca.pem, other-ca.key    a second CA, trusted by no server
#   untrusted.pem, untrusted.key  a client certificate (CN=locksmith) signed by other-ca: for
#                                 "untrusted certificate" tests
# These are test secrets for loopback servers: never use them for anything else.

need_command openssl openssl

readonly TLS_DIR=$STATE/tls
readonly TLS_DAYS=10
readonly TLS_FILES=(ca.pem ca.key server.pem server.key server.keystore.pem client.pem client.key
    other-ca.pem other-ca.key untrusted.pem untrusted.key)

tls_usable() { # every file is there, no certificate expires within the hour
    local f
    for f in "${TLS_FILES[@]}"; do [[ -s $TLS_DIR/$f ]] || return 1; done
    for f in ca server client other-ca untrusted; do
        openssl x509 -noout -checkend 3600 -in "$TLS_DIR/$f.pem" >/dev/null 2>&1 || return 1
    done
}

# Make $TLS_DIR unless it is usable as it is. Built in a temporary directory and renamed into
# place: a start interrupted half-way leaves no half-made CA behind.
tls_ensure() {
    local tmp out
    tls_usable && return 0
    [[ ! -e $TLS_DIR ]] ||
        log "$TLS_DIR is incomplete or expires within the hour: making a new one (secure servers still running use the old one until stopped and started again)"
    tmp=$(mktemp -d "$STATE/.tls.XXXXXX") || die "mktemp in $STATE failed"
    if ! out=$(cd "$tmp" && umask 077 && tls_generate 2>&1); then
        rm -rf -- "$tmp"
        die "making the test CA with openssl failed: ${out:-(no output)}"
    fi
    chmod 755 "$tmp"
    rm -rf -- "$TLS_DIR"
    mv -- "$tmp" "$TLS_DIR"
    log "made a throw-away CA and certificates in $TLS_DIR"
}

# In the current directory (umask 077): every file of TLS_FILES.
tls_generate() {
    cat >openssl.cnf <<'EOF'
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF
    tls_ca ca "locksmith test CA" &&
        tls_ca other-ca "locksmith untrusted test CA" &&
        tls_leaf server ca server localhost &&
        tls_leaf client ca client locksmith &&
        tls_leaf untrusted other-ca client locksmith &&
        cat server.key server.pem >server.keystore.pem &&
        rm -f openssl.cnf ./*.csr &&
        chmod 644 ./*.pem && chmod 600 ./*.key server.keystore.pem
}

tls_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }

tls_ca() { # NAME CN: a self-signed CA, NAME.key and NAME.pem
    tls_key "$1" &&
        openssl req -new -x509 -config openssl.cnf -extensions ca -key "$1.key" \
            -subj "/CN=$2" -days "$TLS_DAYS" -sha256 -out "$1.pem"
}

tls_leaf() { # NAME CA SECTION CN: NAME.key and NAME.pem, signed by CA, extensions of SECTION
    tls_key "$1" &&
        openssl req -new -config openssl.cnf -key "$1.key" -subj "/CN=$4" -out "$1.csr" &&
        openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" \
            -set_serial "0x$(openssl rand -hex 16)" -days "$TLS_DAYS" -sha256 \
            -extfile openssl.cnf -extensions "$3" -out "$1.pem"
}

# Percent-encode what would end or change a URL part (% & ? # + space and quotes), so that a
# state directory with such characters still gives working URLs (and no ' in the exports).
url_escape() {
    local s=$1 out="" c i
    for ((i = 0; i < ${#s}; i++)); do
        c=${s:i:1}
        case $c in
        [%\&?#+\ \'\"\\]) printf -v c '%%%02X' "'$c" ;;
        esac
        out+=$c
    done
    echo "$out"
}

# tls_url SCHEME USER PASSWORD HOST:PORT: the URL of a secure server for locksmith's connect()
# and CLI, with credentials and our CA and client certificate (absolute paths).
tls_url() {
    local dir
    dir=$(url_escape "$TLS_DIR")
    echo "$1://$2:$3@$4?ca=$dir/ca.pem&cert=$dir/client.pem&key=$dir/client.key"
}

# emit, for a value with & or ? in it: single-quoted (tls_url's URLs have no ' in them).
emit_quoted() { emit "$1" "'$2'"; }

# LOCKSMITH_TEST_TLS_DIR (the other files, for tests of untrusted or missing certificates):
# every secure kind's P_exports calls this; the line is printed once.
TLS_EXPORTED=0
tls_exports() {
    ((TLS_EXPORTED)) && return 0
    TLS_EXPORTED=1
    emit LOCKSMITH_TEST_TLS_DIR "$(printf %q "$TLS_DIR")"
}

# Does a TLS handshake with $HOST:$1 (our CA, our client certificate) complete?
tls_handshake() {
    timeout 3 openssl s_client -connect "$HOST:$1" -verify_return_error \
        -CAfile "$TLS_DIR/ca.pem" -cert "$TLS_DIR/client.pem" -key "$TLS_DIR/client.key" \
        </dev/null >/dev/null 2>&1
}
