# shellcheck shell=bash
# scripts/backends.d/zk-secure.sh — `zk-secure`: a standalone ZooKeeper whose clients connect
# over TLS with a client certificate (mutual TLS), for the tests of secured connections.
# A server kind for scripts/backends (the interface is described in lib.sh); loaded after
# zk.sh, whose zoo.cfg lines, launch and four-letter words it shares.
#
# Ports: the TLS client port 21814 (the one of the URL) and a plaintext client port 21815, for
# our readiness checks (four-letter words) and the tests' admin use only.
# THROW-AWAY TEST SECRETS (a loopback server that holds nothing; never use them elsewhere):
#   digest user locksmith, password lock-pass-123 (in the exported URL). The server needs no
#   setup for it: any client may `addauth digest user:password`; the ACLs that clients put on
#   their nodes do the enforcement.
# Clients must present a certificate signed by $STATE/tls/ca.pem (tls.sh).
#
# TLS needs ZooKeeper's Netty connection factory (the default NIO one has no TLS), for both
# ports. Its ssl.* settings are read from zoo.cfg, where ZooKeeper turns every key it does not
# know into the system property "zookeeper.KEY" (ssl.keyStore.location ->
# zookeeper.ssl.keyStore.location, which its X509Util reads).

register_ids zk-secure single zk-secure
need_check zk_jar zookeeper "zookeeper.jar (looked in /usr/share/java, /usr/share/zookeeper)"
need_command java default-jre-headless
need_file /usr/share/java/netty-codec.jar libnetty-java # a dependency of zookeeper

readonly ZK_SECURE_USER=locksmith ZK_SECURE_PASSWORD=lock-pass-123
readonly ZK_NETTY_FACTORY=org.apache.zookeeper.server.NettyServerCnxnFactory

zk_secure_ports() { # TLS 21814, plaintext 21815
    port 21814
    port 21815
}

# zookeeper.jar's manifest names netty-buffer, -common, -handler, -transport and
# -transport-native-epoll, and Debian's netty jars name nothing they need in turn: netty-codec
# must be added (TLS's SslHandler is a decoder: without it every TLS connection dies with
# NoClassDefFoundError io/netty/handler/codec/ByteToMessageDecoder), and for good measure what
# -transport and -transport-native-epoll use (netty-resolver, -transport-native-unix-common).
zk_secure_classpath() {
    local cp j
    cp=$(zk_classpath)
    for j in netty-codec netty-resolver netty-transport-native-unix-common; do
        [[ -f /usr/share/java/$j.jar ]] && cp+=":/usr/share/java/$j.jar"
    done
    echo "$cp"
}

zk_secure_start() {
    local id=$1 dir="$STATE/$1"
    mkdir -p "$dir/data"
    tls_ensure
    {
        zk_base_conf "$id" "$(port 21815)"
        echo "secureClientPort=$(port 21814)"
        echo "secureClientPortAddress=$HOST"
        echo "serverCnxnFactory=$ZK_NETTY_FACTORY"
        # PEM key store: the private key and the certificate in one file.
        echo "ssl.keyStore.location=$TLS_DIR/server.keystore.pem"
        echo "ssl.keyStore.type=PEM"
        echo "ssl.trustStore.location=$TLS_DIR/ca.pem"
        echo "ssl.trustStore.type=PEM"
        # Mutual TLS: no client certificate (or one we do not trust), no connection.
        echo "ssl.clientAuth=need"
    } >"$dir/zoo.cfg"
    zk_launch "$id" org.apache.zookeeper.server.ZooKeeperServerMain "$(zk_secure_classpath)" \
        -Dzookeeper.serverCnxnFactory="$ZK_NETTY_FACTORY"
}

zk_secure_ready() {
    local plain
    plain=$(port 21815)
    [[ $(zk_4lw "$plain" ruok) == imok && $(zk_mode "$plain") == standalone ]] &&
        tls_handshake "$(port 21814)"
}

zk_secure_exports() {
    [[ $1 == single ]] || return 0
    tls_exports
    emit_quoted LOCKSMITH_TEST_ZK_SECURE \
        "$(tls_url zks "$ZK_SECURE_USER" "$ZK_SECURE_PASSWORD" "$(address zk-secure)")"
    emit LOCKSMITH_TEST_ZK_SECURE_PLAIN "$HOST:$(port 21815)"
}
