# shellcheck shell=bash
# scripts/backends.d/postgres-ha.sh — `postgres-ha`: a PostgreSQL primary and its streaming
# standby (`pg-ha1`, `pg-ha2`; `up all` only), replicating synchronously
# (synchronous_standby_names = '*'), for locksmith-postgres's failover tests and the fault suite.
# A server kind for scripts/backends (the interface is described in lib.sh); loaded after
# postgres.sh, whose helpers, users and throw-away passwords it shares.
#
# The first member started with no data and no running partner is initialised as the primary;
# a member started while its partner runs is made its standby (pg_basebackup -R). Which one is
# the primary changes with failovers (`scripts/backends leader postgres-ha` prints it):
#   scripts/backends failover postgres-ha
# kills the primary's processes at once (SIGKILL: a machine that dies, its clients' connections
# reset), resumes the standby if it was paused (`pause ID`: a standby made to lag), promotes it, then makes the killed member a standby of the new
# primary again from a fresh base backup, and returns once it streams synchronously (commits on
# the new primary wait until then: a synchronous standby is required). Start and stop the
# members only through `up`, `down` and `failover`: a member started again by hand after a
# failover would come back as a second primary.
#
# The servers' default is synchronous_commit = local: a client that wants the standby to have
# its commits must ask (locksmith-postgres does, in every session).

register_ids postgres-ha cluster pg-ha1 pg-ha2
leader_group postgres-ha "PostgreSQL primary (the standby's partner)" pg-ha1 pg-ha2

postgres_ha_ports() {
    case $1 in
    pg-ha1) port 15434 ;;
    pg-ha2) port 15435 ;;
    esac
}

postgres_ha_partner() { [[ $1 == pg-ha1 ]] && echo pg-ha2 || echo pg-ha1; }

postgres_ha_start() {
    local id=$1 dir="$STATE/$1" bin partner
    bin=$(postgres_bin) || die "$id: no server in /usr/lib/postgresql/*/bin"
    partner=$(postgres_ha_partner "$id")
    if [[ ! -f $dir/initialized ]]; then
        rm -rf "$dir/data" "$dir/run"
        if owned_pid "$partner" >/dev/null; then
            postgres_ha_clone "$id" "$partner" "$bin"
        else
            postgres_init "$dir" "$bin"
        fi
    fi
    launch "$id" "${POSTGRES_AS[@]}" "$bin/postgres" -D "$dir/data" \
        -c listen_addresses="$HOST" -c port="$(client_port "$id")" \
        -c unix_socket_directories="$dir/run" -c max_connections=100 \
        -c fsync=off -c full_page_writes=off -c autovacuum=off \
        -c synchronous_commit=local -c synchronous_standby_names='*' \
        -c wal_level=replica -c max_wal_senders=4 -c wal_keep_size=64MB -c hot_standby=on
}

# A standby of PARTNER in ID's directory: a base backup, with the settings that follow it (-R).
postgres_ha_clone() { # ID PARTNER BIN
    local id=$1 partner=$2 bin=$3 dir="$STATE/$1" deadline=$((SECONDS + WAIT_SECS))
    until postgres_answers "$(client_port "$partner")"; do
        ((SECONDS < deadline)) || die "$id: $partner does not answer: no base backup to start from"
        sleep 0.2
    done
    mkdir -p "$dir/data" "$dir/run"
    if ((EUID == 0)); then chown postgres:postgres "$dir/data" "$dir/run"; fi
    chmod 700 "$dir/data"
    PGPASSWORD=$POSTGRES_ADMIN_PW postgres_as "$bin/pg_basebackup" -h "$HOST" -p "$(client_port "$partner")" \
        -U postgres -w -D "$dir/data" -R -X stream -c fast -d "application_name=$id" \
        >>"$dir/server.log" 2>&1 || die "$id: pg_basebackup from $partner failed (see $dir/server.log)"
    touch "$dir/initialized"
    log "$id: a standby of $partner"
}

postgres_ha_stop_signal() { echo INT; } # see postgres.sh

postgres_ha_ready() { postgres_answers "$(client_port "$1")"; }

# One value from member ID, as the superuser (the test user may not read replication views).
postgres_ha_query() { # ID SQL
    local bin
    bin=$(postgres_bin) || return 1
    PGPASSWORD=$POSTGRES_ADMIN_PW timeout 3 "$bin/psql" -X -q -t -A -w \
        -h "$HOST" -p "$(client_port "$1")" -U postgres -d postgres -c "$2" 2>/dev/null
}

postgres_ha_is_leader() { [[ $(postgres_ha_query "$1" 'select pg_is_in_recovery()') == f ]]; }

# Whether primary ID has a standby that confirms its commits (sync_state 'sync').
postgres_ha_synced() {
    [[ $(postgres_ha_query "$1" "select count(*) from pg_stat_replication where sync_state = 'sync'") -ge 1 ]] 2>/dev/null
}

postgres_ha_assemble() {
    local primary deadline=$((SECONDS + WAIT_SECS))
    primary=$(find_leader postgres-ha) || die "postgres-ha: no primary"
    until postgres_ha_synced "$primary"; do
        ((SECONDS < deadline)) || die "postgres-ha: $primary has no synchronous standby after ${WAIT_SECS}s"
        sleep 0.2
    done
    log "postgres-ha: $primary is the primary, $(postgres_ha_partner "$primary") its synchronous standby"
}

# The pids of PID's children (from /proc: no procps needed): a paused member's walreceiver and
# backends stop with it.
postgres_ha_helpers() { # PID
    local stat rest
    for stat in /proc/[0-9]*/stat; do
        rest=$(cat "$stat" 2>/dev/null) || continue
        rest=${rest##*) } # past the command name, which may hold spaces: "S PPID ..."
        rest=${rest#* }
        [[ ${rest%% *} == "$1" ]] || continue
        stat=${stat#/proc/}
        echo "${stat%/stat}"
    done
}

postgres_ha_lock_files() { postgres_lock_files "$@"; } # see postgres.sh

postgres_ha_failover() {
    local old new pid bin t0=$SECONDS deadline=$((SECONDS + 60))
    bin=$(postgres_bin) || die "failover: no server in /usr/lib/postgresql/*/bin"
    old=$(find_leader postgres-ha) || die "failover: postgres-ha has no primary now"
    new=$(postgres_ha_partner "$old")
    owned_pid "$new" >/dev/null || die "failover: $new (the standby) is not running"
    # The primary's machine dies: the postmaster and every process of its at once (each child
    # is in a session of its own, so not a process group: its children by their parent pid).
    pid=$(owned_pid "$old")
    # shellcheck disable=SC2046 # one pid per word
    kill -KILL $(server_pids "$pid" "$old") 2>/dev/null || true
    wait_gone "$old" 10 || die "failover: $old (pid $pid) survived SIGKILL"
    rm -f "$STATE/$old/pid"
    # A standby paused to make it lag (the fault suite's lag-failover) is resumed only now, after
    # the primary is gone: what it missed meanwhile, it never gets.
    # shellcheck disable=SC2046 # one pid per word
    kill -CONT $(server_pids "$(owned_pid "$new")" "$new") 2>/dev/null || true
    postgres_as "$bin/pg_ctl" promote -w -D "$STATE/$new/data" >>"$STATE/$new/server.log" 2>&1 ||
        die "failover: promoting $new failed (see $STATE/$new/server.log)"
    until postgres_ha_is_leader "$new"; do
        ((SECONDS < deadline)) || die "failover: $new is not a primary 60s after its promotion"
        sleep 0.1
    done
    log "failover: killed $old, promoted $new ($((SECONDS - t0))s); $old comes back as its standby"
    # The killed member's data may hold what the standby never had: a new base backup.
    rm -rf "$STATE/$old/data" "$STATE/$old/run" "$STATE/$old/initialized"
    start_server "$old"
    wait_ready "$old"
    until postgres_ha_synced "$new"; do
        ((SECONDS < deadline)) || die "failover: $old does not stream synchronously from $new after 60s"
        sleep 0.2
    done
    log "failover: $new is the primary, $old its synchronous standby ($((SECONDS - t0))s)"
    echo "$new"
}

postgres_ha_exports() {
    [[ $1 == cluster ]] || return 0
    emit LOCKSMITH_TEST_POSTGRES_HA \
        "postgres://$POSTGRES_TEST_USER:$POSTGRES_TEST_PW@$(addresses pg-ha1 pg-ha2)/$POSTGRES_TEST_DB"
}
