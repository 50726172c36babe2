# shellcheck shell=bash
# scripts/backends.d/mysql-ha.sh — `mysql-ha`: a MariaDB primary and its replica (`mysql-ha1`,
# `mysql-ha2`; `up all` only), GTID replication, semi-synchronous (MariaDB's built-in
# rpl_semi_sync_master/slave, wait point AFTER_SYNC: a commit is acknowledged to its client only
# once the replica has it in its relay log), for locksmith-mysql's failover tests and the fault
# suite. A server kind for scripts/backends (the interface is described in lib.sh); loaded after
# mysql.sh, whose helpers, test user and throw-away password it shares.
#
# The first member started with no data and no running partner is initialised as the primary;
# a member started while its partner runs is made its replica (read_only, replicating from the
# start of the primary's binary log). Which one is the primary changes with failovers
# (`scripts/backends leader mysql-ha` prints it):
#   scripts/backends failover mysql-ha
# kills the primary at once (SIGKILL: a machine that dies, its clients' connections reset),
# resumes the replica if it was paused (`pause ID`: a replica made to lag), lets it apply what
# its relay log holds, promotes it (replication stopped and forgotten, read_only off), then makes
# the killed member a replica of the new primary again from an empty data directory, and returns
# once it acknowledges semi-synchronously (commits on the new primary wait until then). Start and
# stop the members only through `up`, `down` and `failover`: a member started again by hand
# after a failover would come back as a second primary.
#
# Semi-synchronous, not synchronous: a primary whose replica does not acknowledge a commit within
# rpl_semi_sync_master_timeout goes on alone (asynchronously) until the replica catches up. The
# timeout here is an hour (LOCKSMITH_MYSQL_HA_SEMI_SYNC_MS): as PostgreSQL's synchronous standby,
# the commits wait for the replica (a client's request times out first). A test that wants an
# asynchronous replica turns it off on the primary (`SET GLOBAL rpl_semi_sync_master_enabled =
# OFF`, as the admin user); a failover starts both members with it on again.
#
# The exported URL lists both members: locksmith-mysql connects to the one that takes writes
# (backend-mysql/src/conn/dial.rs), and its failover tests and the fault suite's `mysql/ha`
# (chaos/src/targets.rs) use it as it is; one of those tests puts a forwarder of its own in front
# of the current primary instead (a virtual IP, or a proxy such as ProxySQL).
#
# Throw-away test secrets (the servers listen on loopback only), besides mysql.sh's test user:
#   admin user        locksmith_admin / locksmith-admin-pw: every right (replication status,
#                     SET GLOBAL); exported as LOCKSMITH_TEST_MYSQL_HA_ADMIN
#   replication user  locksmith_repl / locksmith-repl-pw: REPLICATION SLAVE only

register_ids mysql-ha cluster mysql-ha1 mysql-ha2
leader_group mysql-ha "MariaDB primary (the replica's partner)" mysql-ha1 mysql-ha2

readonly MYSQL_ADMIN_USER=locksmith_admin MYSQL_ADMIN_PW=locksmith-admin-pw
readonly MYSQL_REPL_USER=locksmith_repl MYSQL_REPL_PW=locksmith-repl-pw
readonly MYSQL_HA_SEMI_SYNC_MS=${LOCKSMITH_MYSQL_HA_SEMI_SYNC_MS:-3600000}

mysql_ha_ports() {
    case $1 in
    mysql-ha1) port 13308 ;;
    mysql-ha2) port 13309 ;;
    esac
}

mysql_ha_partner() { [[ $1 == mysql-ha1 ]] && echo mysql-ha2 || echo mysql-ha1; }

mysql_ha_start() {
    local id=$1 dir="$STATE/$1" bin partner role read_only=OFF semi_sync=ON
    bin=$(mysql_bin) || die "$id: no server (/usr/sbin/mariadbd)"
    partner=$(mysql_ha_partner "$id")
    if [[ ! -f $dir/initialized ]]; then
        rm -rf "$dir/run" "$dir/role" "$dir/server-id" # mysql_init empties data/
        mysql_init "$dir"
        # A new server id at each initialisation: a replica skips the events of its own id, and
        # a member made again from nothing must replay those it wrote as an earlier primary.
        echo $((RANDOM * 32768 + RANDOM + 1)) >"$dir/server-id"
        if owned_pid "$partner" >/dev/null; then echo replica >"$dir/role"; else echo primary >"$dir/role"; fi
    fi
    role=$(<"$dir/role")
    # A replica does not wait for acknowledgements itself (its applied events, written to its
    # binary log, would wait for a replica it does not have): its promotion turns it on.
    [[ $role == primary ]] || read_only=ON semi_sync=OFF
    mkdir -p "$dir/run"
    if ((EUID == 0)); then chown mysql:mysql "$dir/run"; fi
    # Out of the binary log (sql_log_bin = 0): each member makes its own users, and a replica's
    # GTIDs are only its primary's.
    cat >"$dir/init.sql" <<EOF
SET sql_log_bin = 0;
CREATE DATABASE IF NOT EXISTS $MYSQL_TEST_DB;
CREATE USER IF NOT EXISTS '$MYSQL_TEST_USER'@'%' IDENTIFIED BY '$MYSQL_TEST_PW';
GRANT ALL PRIVILEGES ON \`$MYSQL_TEST_DB\`.* TO '$MYSQL_TEST_USER'@'%';
GRANT ALL PRIVILEGES ON \`${MYSQL_TEST_DB}\\_%\`.* TO '$MYSQL_TEST_USER'@'%';
CREATE USER IF NOT EXISTS '$MYSQL_ADMIN_USER'@'%' IDENTIFIED BY '$MYSQL_ADMIN_PW';
GRANT ALL PRIVILEGES ON *.* TO '$MYSQL_ADMIN_USER'@'%' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS '$MYSQL_REPL_USER'@'%' IDENTIFIED BY '$MYSQL_REPL_PW';
GRANT REPLICATION SLAVE ON *.* TO '$MYSQL_REPL_USER'@'%';
EOF
    chmod 644 "$dir/init.sql"
    # As mysql.sh's server, plus a binary log (row events, the replica's applied ones included:
    # log_slave_updates, so that a promoted replica's log holds the whole history for the next
    # replica), semi-synchronous replication (the primary waits for its replica's acknowledgements, the replica
    # sends them).
    launch "$id" "${MYSQL_AS[@]}" "$bin" --no-defaults --datadir="$dir/data" \
        --socket="$dir/run/mysqld.sock" --pid-file="$dir/run/mariadbd.pid" \
        --bind-address="$(host_of "$id")" --port="$(client_port "$id")" \
        --init-file="$dir/init.sql" --skip-name-resolve --max-connections=500 \
        --innodb-flush-log-at-trx-commit=2 "${MYSQL_REDO_LOG[@]}" \
        --server-id="$(<"$dir/server-id")" --log-bin="$dir/data/binlog" --relay-log="$dir/data/relay" \
        --log-slave-updates --binlog-format=ROW --read-only="$read_only" \
        --rpl-semi-sync-master-enabled="$semi_sync" --rpl-semi-sync-slave-enabled=ON \
        --rpl-semi-sync-master-wait-point=AFTER_SYNC \
        --rpl-semi-sync-master-timeout="$MYSQL_HA_SEMI_SYNC_MS"
}

mysql_ha_lock_files() { mysql_lock_files "$@"; } # see mysql.sh

mysql_ha_ready() { mysql_answers "$(client_port "$1")"; }

# The admin user's answer to SQL on member ID (tab-separated, no headers; `\G` for one column
# per line).
mysql_ha_query() { # ID SQL
    timeout 5 mariadb --no-defaults -h "$HOST" -P "$(client_port "$1")" -u "$MYSQL_ADMIN_USER" \
        -p"$MYSQL_ADMIN_PW" -N -B -e "$2" 2>/dev/null
}

# One field of member ID's `SHOW SLAVE STATUS` (empty when it replicates nothing).
mysql_ha_slave_field() { # ID FIELD
    timeout 5 mariadb --no-defaults -h "$HOST" -P "$(client_port "$1")" -u "$MYSQL_ADMIN_USER" \
        -p"$MYSQL_ADMIN_PW" -e 'show slave status\G' 2>/dev/null | sed -n "s/^ *$2: *//p"
}

mysql_ha_is_leader() { [[ $(mysql_ha_query "$1" 'select @@global.read_only') == 0 ]]; }

# Whether primary ID has a replica that acknowledges its commits now.
mysql_ha_synced() {
    local status clients
    status=$(mysql_ha_query "$1" "show global status like 'Rpl_semi_sync_master_status'") || return 1
    clients=$(mysql_ha_query "$1" "show global status like 'Rpl_semi_sync_master_clients'") || return 1
    [[ ${status##*[[:space:]]} == ON && ${clients##*[[:space:]]} -ge 1 ]] 2>/dev/null
}

# Makes member ID replicate PRIMARY (from the start of its binary log) unless it already does.
mysql_ha_follow() { # ID PRIMARY
    local id=$1 primary=$2
    [[ -z $(mysql_ha_query "$id" 'show slave status') ]] || return 0
    mysql_ha_query "$id" "CHANGE MASTER TO MASTER_HOST='$(host_of "$primary")', \
MASTER_PORT=$(client_port "$primary"), MASTER_USER='$MYSQL_REPL_USER', \
MASTER_PASSWORD='$MYSQL_REPL_PW', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1; START SLAVE" ||
        die "$id: making it a replica of $primary failed (see $STATE/$id/server.log)"
    log "$id: a replica of $primary"
}

# Waits until PRIMARY's replica acknowledges its commits.
mysql_ha_wait_synced() { # PRIMARY DEADLINE
    until mysql_ha_synced "$1"; do
        ((SECONDS < $2)) || die "mysql-ha: $1 has no semi-synchronous replica (see $STATE/$(mysql_ha_partner "$1")/server.log)"
        sleep 0.2
    done
}

mysql_ha_assemble() {
    local primary replica
    primary=$(find_leader mysql-ha) || die "mysql-ha: no primary"
    replica=$(mysql_ha_partner "$primary")
    mysql_ha_follow "$replica" "$primary"
    mysql_ha_wait_synced "$primary" $((SECONDS + WAIT_SECS))
    log "mysql-ha: $primary is the primary, $replica its semi-synchronous replica"
}

mysql_ha_failover() {
    local old new pid pos t0=$SECONDS deadline=$((SECONDS + 60))
    old=$(find_leader mysql-ha) || die "failover: mysql-ha has no primary now"
    new=$(mysql_ha_partner "$old")
    owned_pid "$new" >/dev/null || die "failover: $new (the replica) is not running"
    # The primary's machine dies: mariadbd (one process) at once.
    pid=$(owned_pid "$old")
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$old" 10 || die "failover: $old (pid $pid) survived SIGKILL"
    rm -f "$STATE/$old/pid"
    clear_stale_lock_files "$old"
    # A replica paused to make it lag is resumed only now, after the primary is gone: what it
    # missed meanwhile, it never gets.
    kill -CONT "$(owned_pid "$new")" 2>/dev/null || true
    # What the replica received (its relay log: every commit acknowledged to a client) is applied
    # before it takes writes.
    mysql_ha_query "$new" 'STOP SLAVE IO_THREAD' >/dev/null ||
        die "failover: $new does not answer (see $STATE/$new/server.log)"
    # (Promoting it before would lose what the relay log holds: RESET SLAVE ALL deletes it.)
    # An empty position: it received nothing, there is nothing to apply.
    pos=$(mysql_ha_slave_field "$new" Gtid_IO_Pos)
    if [[ -n $pos ]] && [[ $(mysql_ha_query "$new" "select master_gtid_wait('$pos', 30)") != 0 ]]; then
        die "failover: $new did not apply its relay log (up to $pos) within 30s"
    fi
    log "failover: $new applied what it received (up to ${pos:-nothing})"
    mysql_ha_query "$new" 'STOP SLAVE; RESET SLAVE ALL; SET GLOBAL rpl_semi_sync_master_enabled = ON; SET GLOBAL read_only = OFF' >/dev/null ||
        die "failover: promoting $new failed (see $STATE/$new/server.log)"
    echo primary >"$STATE/$new/role"
    until mysql_ha_is_leader "$new"; do
        ((SECONDS < deadline)) || die "failover: $new is not a primary 60s after its promotion"
        sleep 0.1
    done
    log "failover: killed $old, promoted $new ($((SECONDS - t0))s); $old comes back as its replica"
    # The killed member's data may hold what the replica never had: made again from nothing.
    rm -rf "$STATE/$old/data" "$STATE/$old/run" "$STATE/$old/initialized"
    start_server "$old"
    wait_ready "$old"
    mysql_ha_follow "$old" "$new"
    mysql_ha_wait_synced "$new" "$deadline"
    log "failover: $new is the primary, $old its semi-synchronous replica ($((SECONDS - t0))s)"
    echo "$new"
}

mysql_ha_exports() {
    [[ $1 == cluster ]] || return 0
    emit LOCKSMITH_TEST_MYSQL_HA \
        "mysql://$MYSQL_TEST_USER:$MYSQL_TEST_PW@$(addresses mysql-ha1 mysql-ha2)/$MYSQL_TEST_DB"
    emit LOCKSMITH_TEST_MYSQL_HA_ADMIN \
        "mysql://$MYSQL_ADMIN_USER:$MYSQL_ADMIN_PW@$(addresses mysql-ha1 mysql-ha2)/mysql"
}
