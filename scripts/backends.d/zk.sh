# shellcheck shell=bash
# scripts/backends.d/zk.sh — ZooKeeper: a standalone server `zk` and a 3-node ensemble `zk-1..3`.
# A server kind for scripts/backends (the interface is described in lib.sh).

register_ids zk single zk
clock_ids zk
register_ids zk cluster zk-1 zk-2 zk-3
netns_ids zk-1 zk-2 zk-3
leader_group zk-ensemble "ZooKeeper ensemble leader" zk-1 zk-2 zk-3
need_check zk_jar zookeeper "zookeeper.jar (looked in /usr/share/java, /usr/share/zookeeper)" # pulls libzookeeper-java + deps
need_command java default-jre-headless
# backend-zk/tests/curator_interop.rs runs Apache Curator's recipes against locksmith's: it compiles
# its Java peer with javac against Debian's Curator jars (which pull in the framework and client).
need_file /usr/share/java/curator-recipes.jar libcurator-recipes-java
need_command javac default-jdk-headless

# Client 21810 (+member); ensemble members also quorum 2888N and election 2988N, all below the
# ephemeral range (32768 and up), where a client socket could take a stopped member's port.
zk_ports() {
    local n
    n=$(member_of "$1")
    port $((21810 + ${n:-0}))
    [[ -z $n ]] || echo "$(port $((28880 + n))) $(port $((29880 + n)))"
}

zk_jar() {
    local j
    for j in /usr/share/java/zookeeper.jar /usr/share/zookeeper/zookeeper.jar; do
        [[ -f $j ]] && {
            echo "$j"
            return 0
        }
    done
    return 1
}

# ZooKeeper's classpath from Debian's packages. /usr/share/java/zookeeper.jar's manifest
# Class-Path lists its dependencies (zookeeper-jute, slf4j-api, netty, jetty, jackson,
# commons-cli/io, metrics, snappy ...), all pulled in by libzookeeper-java. It names no
# slf4j *binding*, without which ZooKeeper logs nothing: we add slf4j-simple (package
# libslf4j-java, a dependency of libzookeeper-java), which logs to stderr = server.log.
zk_classpath() {
    local cp j
    cp=$(zk_jar) || die "zookeeper.jar not found (is the 'zookeeper' package installed?)"
    for j in /usr/share/java/zookeeper-jute.jar /usr/share/java/slf4j-simple.jar; do
        [[ -f $j ]] && cp+=":$j"
    done
    echo "$cp"
}

# zk_base_conf ID CLIENT_PORT: the zoo.cfg lines every ZooKeeper of ours has (zk-secure.sh adds
# its TLS port and settings to them).
zk_base_conf() {
    local id=$1 dir="$STATE/$1" cport=$2
    echo "# written by scripts/backends for server '$id'"
    # Time unit 200 ms: sessions expire and are checked at this granularity.
    echo "tickTime=200"
    # Session timeouts a client asks for are clamped to [min, max]. The tests use short
    # sessions (expiry within ~1 s) and also normal ones: the default max would be
    # 20 * tickTime = 4 s, far too low, and the min 2 * tickTime = 400 ms.
    echo "minSessionTimeout=400"
    echo "maxSessionTimeout=60000"
    # Ensemble: followers get 50 ticks (10 s) to connect and sync, 25 ticks (5 s) to lag.
    echo "initLimit=50"
    echo "syncLimit=25"
    echo "dataDir=$dir/data"
    echo "clientPort=$cport"
    echo "clientPortAddress=$(host_of "$id")"
    # No per-IP connection limit: every test connects from 127.0.0.1 (default 60).
    echo "maxClientCnxns=0"
    # The AdminServer (Jetty) would listen on 8080: not wanted.
    echo "admin.enableServer=false"
    # Four-letter words (ruok, srvr, mntr ...): our health checks and the benchmarks.
    echo "4lw.commands.whitelist=*"
    # Test data: no fsync per transaction (a killed process loses nothing, only a
    # machine crash would), and 4 MB instead of 64 MB preallocated log files.
    echo "forceSync=no"
    echo "preAllocSize=4096"
}

zk_start() {
    local id=$1 n dir="$STATE/$1" i main
    n=$(member_of "$id")
    mkdir -p "$dir/data"
    {
        zk_base_conf "$id" "$(client_port "$id")"
        if [[ -n $n ]]; then
            for i in 1 2 3; do
                echo "server.$i=$(host_of "zk-$i"):$(port $((28880 + i))):$(port $((29880 + i)))"
            done
        fi
    } >"$dir/zoo.cfg"
    if [[ -n $n ]]; then
        echo "$n" >"$dir/data/myid"
        main=org.apache.zookeeper.server.quorum.QuorumPeerMain
    else
        main=org.apache.zookeeper.server.ZooKeeperServerMain
    fi
    zk_launch "$id" "$main" "$(zk_classpath)"
}

# zk_launch ID MAIN CLASSPATH [JVM OPTIONS...]: run ZooKeeper's MAIN class on $STATE/ID/zoo.cfg.
# java is exec'd directly (no zkServer.sh wrapper), so the recorded pid is the JVM's.
zk_launch() {
    local id=$1 dir="$STATE/$1"
    launch "$id" java \
        -Xms32m -Xmx256m -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError \
        -Djava.net.preferIPv4Stack=true \
        -Dzookeeper.admin.enableServer=false \
        -Dzookeeper.jmx.log4j.disable=true \
        -Dzookeeper.log.dir="$dir" \
        -Dorg.slf4j.simpleLogger.showDateTime=true \
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS" \
        "${@:4}" \
        -cp "$3" \
        "$2" "$dir/zoo.cfg"
}

# PORT WORD [HOST]: a ZooKeeper four-letter word (ruok, srvr, mntr ...), via bash's /dev/tcp.
zk_4lw() {
    # shellcheck disable=SC2016 # expanded by the inner bash
    timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1; printf %s "$2" >&3; cat <&3' \
        "${3:-$HOST}" "$1" "$2" 2>/dev/null
}

zk_mode() { # PORT [HOST]: standalone | leader | follower | (empty: not serving)
    local out
    out=$(zk_4lw "$1" srvr "${2:-}") || return 0
    sed -n 's/^Mode: //p' <<<"$out"
}

zk_ready() {
    local id=$1 port out host
    port=$(client_port "$id") host=$(host_of "$id")
    [[ $(zk_4lw "$port" ruok "$host") == imok ]] || return 1
    out=$(zk_mode "$port" "$host")
    if [[ -z $(member_of "$id") ]]; then
        [[ $out == standalone ]]
    else
        [[ $out == leader || $out == follower ]]
    fi
}

zk_is_leader() { [[ $(zk_mode "$(client_port "$1")" "$(host_of "$1")") == leader ]]; }

zk_exports() {
    case $1 in
    single) emit LOCKSMITH_TEST_ZK "zk://$(address zk)" ;;
    cluster) emit LOCKSMITH_TEST_ZK_ENSEMBLE "zk://$(addresses zk-1 zk-2 zk-3)" ;;
    esac
}
