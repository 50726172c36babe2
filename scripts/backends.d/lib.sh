# shellcheck shell=bash
# scripts/backends.d/lib.sh — what every server kind shares: settings, logging, the id and kind
# registry, ports, pid files and ownership, launch/terminate, installation, readiness.
# Sourced by scripts/backends (which documents the commands, servers and tunables).
#
# The external tools that scripts/backends (with backends.d/*), scripts/test, scripts/bench and
# .ci/run use, as seen on a bare Debian 12 machine with only bash, coreutils, apt and the Rust
# toolchain, and how each is handled (`up` = installed by `scripts/backends up` when missing;
# `check` = tested by `scripts/backends check-build-deps`, which scripts/test and scripts/bench
# run before any cargo step and which prints one line per problem):
#   bash (/dev/tcp), coreutils (timeout mktemp readlink tr tail date nproc uname ...), sed,
#     grep, kill/printf (bash builtins), /proc          Essential / Linux: assumed
#   setsid, flock                   util-linux                        up
#   awk (etcd leader, bench)        mawk                              up
#   etcd, etcdctl                   etcd-server, etcd-client          up (etcd.sh)
#   zookeeper.jar (+ deps), java    zookeeper, default-jre-headless   up (zk.sh)
#   curator-recipes.jar, javac      libcurator-recipes-java,          up (zk.sh)
#     (locksmith-zk's Curator tests)  default-jdk-headless
#   redis-server, redis-cli         redis-server, redis-tools         up (redis.sh)
#   openssl (the secure servers'    openssl                           up (tls.sh)
#     throw-away CA; TLS checks)
#   protoc                          protobuf-compiler                 up + check
#   protoc's include files          libprotobuf-dev                   up (by descriptor.proto)
#     (google/protobuf/*.proto)                                       + check
#   cc (rustc links with it; aws-lc gcc, libc6-dev                    up (by cc, stdio.h)
#     compiles C; the clock-jump                                      + check
#     tests build clockshift.so)
#   /etc/ssl/certs/ca-certificates.crt (cargo fetches crates over HTTPS)  ca-certificates: up
#   pkg-config, OpenSSL headers     pkg-config, libssl-dev            up (lockbench's postgres
#     (openssl-sys, under sqlx)                                        peer crate)
#   apt-get; sudo when not root     apt; sudo                         one-line error if missing
#   cargo                           (rustup)                          check: one-line error
#   rustfmt, clippy                 (rustup components)               scripts/test adds them with
#                                                                     rustup; one-line error without
#   python3 (+ venv)                python3, python3-venv             up (s3.sh: moto); scripts/test,
#                                                                     check-deps, cycles also use it
# Not used: curl, wget, nc, systemctl (ss is only named in an error hint; git only by the
# scripts that read the checkout: check-doc-paths, semver; a clone has it).
# `up` installs everything missing with one `apt-get update` and one `apt-get install`, and
# runs no apt-get at all when nothing is missing.

readonly HOST=127.0.0.1

# --- settings ----------------------------------------------------------------------------

STATE=${LOCKSMITH_BACKENDS_DIR:-${TMPDIR:-/tmp}/locksmith-backends}
[[ $STATE == /* ]] || STATE="$PWD/$STATE" # absolute: it is our ownership marker in cmdlines
STATE=${STATE%/}
[[ -n $STATE ]] || STATE=/locksmith-backends # LOCKSMITH_BACKENDS_DIR=/ would be unwise
readonly STATE

readonly WAIT_SECS=${LOCKSMITH_BACKENDS_TIMEOUT:-60}
readonly GRACE_SECS=${LOCKSMITH_BACKENDS_GRACE:-10}
# stored_setting VARIABLE FILE: the value a state dir was set up with (stored in its FILE by
# `up` and `start`, see record_settings), so that later commands (start, leader, check ...) use it
# without being told again; VARIABLE from the environment must agree with it (empty or `auto`
# always do). Without a stored value: VARIABLE's. Exits the caller's $(...) with 1 on a conflict.
stored_setting() {
    local given=${!1:-} stored
    [[ -s $STATE/$2 ]] || {
        echo "$given"
        return
    }
    stored=$(<"$STATE/$2")
    if [[ -n $given && $given != auto && $given != "$stored" ]]; then
        echo "backends: error: $STATE was set up with $1=$stored, not $given" >&2
        exit 1
    fi
    echo "$stored"
}

PORT_OFFSET=$(stored_setting LOCKSMITH_BACKENDS_PORT_OFFSET port-offset) || exit 1
PORT_OFFSET=${PORT_OFFSET:-0}
if ! [[ $PORT_OFFSET =~ ^[0-9]+$ ]] || ((PORT_OFFSET > 26000)); then
    echo "backends: error: LOCKSMITH_BACKENDS_PORT_OFFSET must be a number from 0 to 26000" >&2
    exit 1
fi
readonly PORT_OFFSET

# Marker file: `down` only deletes a state directory that `up` created.
# shellcheck disable=SC2034 # used in commands.sh
readonly MARKER=.locksmith-backends

# --- logging ------------------------------------------------------------------------------

# Messages go to stderr (stdout is for the export lines). `|| true`: a closed stderr
# (e.g. `... 2>&1 | head`, with SIGPIPE ignored) must not abort a `down` half-way.
log() { printf 'backends: %s\n' "$*" >&2 || true; }
# A message that names a log, "(see FILE)", is followed by that log's last lines: a CI run keeps
# only what was printed, not the state directory.
die() {
    printf 'backends: error: %s\n' "$*" >&2 || true
    if [[ $* =~ \(see\ ([^\)]+)\) ]] && [[ -f ${BASH_REMATCH[1]} ]]; then
        printf 'backends: the last lines of %s:\n' "${BASH_REMATCH[1]}" >&2 || true
        tail -n 25 "${BASH_REMATCH[1]}" | sed 's/^/    /' >&2 || true
        df -h "$(dirname "${BASH_REMATCH[1]}")" 2>/dev/null | sed 's/^/    /' >&2 || true
    fi
    exit 1
}

emit() { printf 'export %s=%s\n' "$1" "$2"; } # one line for `eval "$(scripts/backends up)"`

# --- server kinds: the interface ----------------------------------------------------------
#
# A kind is one file, backends.d/KIND.sh, loaded by one `use_kind KIND` line in
# scripts/backends (the order of those lines is the order of ids, starts, status and exports).
# Its functions are named with the prefix P = KIND with '-' replaced by '_' (redis-sentinel ->
# redis_sentinel_start ...). At load time (top level) the file calls:
#   register_ids KIND single|cluster ID...   its servers: `single` ones are started by `up single`
#                                    and `up all`, `cluster` ones only by `up all`. An id ending
#                                    in a digit is member N of a group (member_of prints N).
#   need_command CMD PACKAGE         Debian package that `up` installs when CMD is missing;
#   need_file PATH PACKAGE           ... when PATH is missing;
#   need_check FUNCTION PACKAGE WHAT ... when FUNCTION fails (WHAT names it in errors).
#   netns_ids ID...                  optional: the ids that run in network namespaces of their
#                                    own in the netns mode (see netns.sh).
#   clock_ids ID...                  optional: the ids that run under the clock shim in the
#                                    clock mode (see clocks.sh).
#   leader_group NAME "DESCRIPTION" ID...   optional: `leader NAME` prints which of the IDs
#                                    leads (asks P_is_leader of each running one); `help`
#                                    says "print the id ... of the current DESCRIPTION".
# and defines:
#   P_ports ID      print every port ID listens on (through `port N`, which adds the offset),
#                   the client port first (it is the address in status and the URLs). Checked
#                   to be free before a start. Pure computation: the server need not run.
#   P_start ID      write ID's config into $STATE/ID/ (exists; ports are free) and start the
#                   server with `launch ID COMMAND ARGS...`. The command line must contain
#                   "$STATE/ID/" (a config or data path): that is how we recognise our process.
#   P_ready ID      exit 0 if ID answers and is in the expected role (polled by wait_ready and
#                   `check`, so quick and quiet: short timeouts, no output).
#   P_exports SET   print, with `emit NAME VALUE`, the LOCKSMITH_TEST_* lines for this kind's
#                   ids of SET (single | cluster); print nothing if it has none there.
# and optionally:
#   P_is_leader ID  exit 0 if member ID says it is its group's leader (for leader_group).
#   P_stop_last     print ids that `down` must stop after all the others (see etcd.sh).
#   P_helpers PID   print the pids of the server's other processes, which `pause` and `resume`
#                   signal with it (see postgres-ha.sh: a postmaster's children).
#   P_stop_signal ID  print the signal that stops ID gracefully (default TERM; PostgreSQL's
#                   TERM waits for every client to leave, its INT does not: see postgres.sh).
#   P_lock_files ID print the files ID writes with its pid in their first line and removes
#                   when it stops cleanly but not when it is killed (PostgreSQL's postmaster.pid):
#                   `kill` removes them once the server is gone, and a start removes those whose
#                   pid is no live process of ID's (clear_stale_lock_files).
#   P_settle ID     after `up` started ID (not after `start ID`) and it answers: wait until it
#                   is fit for the tests (see redis.sh).
#   P_assemble ID...  after every server of `up` answers, with this kind's ids among them
#                   (started now or before): join them into what they form and wait until it
#                   works (redis-cluster.sh makes its cluster once). Runs before the P_settles.
#   P_healed ID     after `heal ID` (netns mode): wait until ID serves in its role again.
#   P_failover NAME, P_reshard NAME ARGS..., P_slot_owner NAME ARGS...   the kind's own
#                   `scripts/backends failover|reshard|slot-owner NAME ...`; NAME is the kind or
#                   one of its leader groups (see redis-sentinel.sh, redis-cluster.sh).

KINDS=() SINGLE_IDS=() CLUSTER_IDS=() LEADER_GROUPS=()
declare -A KIND_OF=() GROUP_MEMBERS=() GROUP_DESC=()
NEED_PKG=() NEED_FN=() NEED_ARG=() NEED_WHAT=()

use_kind() {
    local f
    [[ -f $BACKENDS_LIB/$1.sh ]] || die "no such server kind: $BACKENDS_LIB/$1.sh"
    # shellcheck source=/dev/null # one of backends.d/*.sh
    source "$BACKENDS_LIB/$1.sh"
    for f in ports start ready exports; do
        declare -F "${1//-/_}_$f" >/dev/null || die "$1.sh does not define ${1//-/_}_$f"
    done
    KINDS+=("$1")
}

register_ids() {
    local kind=$1 set=$2 id
    shift 2
    for id in "$@"; do
        KIND_OF[$id]=$kind
        case $set in
        single) SINGLE_IDS+=("$id") ;;
        cluster) CLUSTER_IDS+=("$id") ;;
        *) die "register_ids $kind: unknown set '$set' (single or cluster)" ;;
        esac
    done
}

leader_group() {
    local name=$1
    LEADER_GROUPS+=("$name")
    GROUP_DESC[$name]=$2
    shift 2
    GROUP_MEMBERS[$name]="$*"
}

# shellcheck disable=SC2034 # GROUP_DESC is used in commands.sh
seal_kinds() { # after the last use_kind
    ALL_IDS=("${SINGLE_IDS[@]}" "${CLUSTER_IDS[@]}")
    readonly KINDS SINGLE_IDS CLUSTER_IDS ALL_IDS KIND_OF LEADER_GROUPS GROUP_MEMBERS GROUP_DESC
}

is_known_id() { [[ -n ${KIND_OF[$1]:-} ]]; }

# kind_call ID FUNCTION ARGS...: run ID's kind's FUNCTION (start, ready, ports ...) for ID.
kind_call() {
    local kind=${KIND_OF[$1]:-}
    [[ -n $kind ]] || die "unknown server id '$1' (known: ${ALL_IDS[*]})"
    "${kind//-/_}_$2" "$1" "${@:3}"
}

member_of() { # 1..3 for cluster members, empty for the single servers
    local id=$1
    if [[ $id =~ ([0-9])$ ]]; then echo "${BASH_REMATCH[1]}"; fi
}

# --- ports --------------------------------------------------------------------------------

port() { echo $(($1 + PORT_OFFSET)); } # every port goes through here

all_ports() { kind_call "$1" ports; } # every port the server listens on

client_port() {
    local ports
    ports=$(all_ports "$1")
    echo "${ports%%[[:space:]]*}"
}

address() { echo "$(host_of "$1"):$(client_port "$1")"; }

addresses() { # "host:port,host:port,..." of the ids given
    local id out=()
    for id in "$@"; do out+=("$(address "$id")"); done
    local IFS=,
    echo "${out[*]}"
}

# Is anything accepting TCP connections on ${2:-$HOST}:$1? (bash's /dev/tcp: no nc needed)
port_open() {
    # shellcheck disable=SC2016 # expanded by the inner bash
    timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "${2:-$HOST}" "$1" 2>/dev/null
}

# --- processes: pid files and ownership ---------------------------------------------------

# Process state letter from /proc (R, S, D, T = stopped, Z = zombie, ...), empty if gone.
proc_state() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) } # the command name in (...) may contain spaces
    echo "${stat%% *}"
}

# Print the pid of server $1 if its pid file names a live process that is really ours:
# every server's command line contains its own directory "$STATE/<id>/" (a data dir or a
# config file path), so a recycled pid or a foreign process is never mistaken for ours.
# Zombies (killed but not yet reaped by whoever adopted them) count as gone.
owned_pid() {
    local id=$1 pidfile="$STATE/$1/pid" pid cmdline st
    [[ -s $pidfile ]] || return 1
    read -r pid <"$pidfile" || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    st=$(proc_state "$pid")
    [[ -n $st && $st != Z && $st != X ]] || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmdline == *"$STATE/$id/"* ]] || return 1
    echo "$pid"
}

# Start "$@" as server $1, detached (own session, stdin/stdout/stderr not inherited: the
# caller's `$(scripts/backends up)` must not wait for the servers), logging to server.log.
# The pid recorded is the server's own: the wrapper shell writes its pid, then execs it.
launch() {
    local id=$1 dir="$STATE/$1" i netns clock
    shift
    netns=$(netns_exec "$id") || exit 1
    clock=$(clock_exec "$id") || exit 1
    # shellcheck disable=SC2086 # `ip netns exec NAME` and `env LD_PRELOAD=... CLOCKSHIFT_FILE=...`,
    # or nothing: each execs the next (the pid recorded is the server's)
    set -- $netns $clock "$@"
    rm -f "$dir/pid"
    printf '\n===== %s: starting: %s\n' "$(date '+%F %T')" "$*" >>"$dir/server.log"
    # fd 9 is our flock on the state dir: the server must not inherit (and hold) it.
    # shellcheck disable=SC2016 # expanded by the inner bash
    setsid bash -c 'echo "$$" >"$1.tmp" && mv -f "$1.tmp" "$1" && shift && exec "$@"' \
        launch "$dir/pid" "$@" </dev/null >>"$dir/server.log" 2>&1 9>&- &
    for ((i = 0; i < 200; i++)); do
        [[ -s $dir/pid ]] && return 0
        sleep 0.05
    done
    die "$id: the launcher did not record a pid (see $dir/server.log)"
}

# Remove the lock files of server $1 (P_lock_files) that name a pid which is not a live process
# of $1's: one it left when it was killed. A killed process's parent must reap it, and the one
# that inherits our detached servers (pid 1) may be slow to, or never do: PostgreSQL takes the
# unreaped zombie of its killed postmaster for a postmaster still running ("lock file
# "postmaster.pid" already exists") and refuses to start.
clear_stale_lock_files() { # ID
    local id=$1 kind=${KIND_OF[$1]:-} file pid st cmdline
    [[ -n $kind ]] && declare -F "${kind//-/_}_lock_files" >/dev/null || return 0
    for file in $("${kind//-/_}_lock_files" "$id"); do
        [[ -f $file ]] || continue
        pid=$(head -n 1 "$file" 2>/dev/null) || pid=
        if [[ $pid =~ ^[0-9]+$ ]]; then
            st=$(proc_state "$pid")
            if [[ -n $st && $st != Z && $st != X ]]; then
                cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || cmdline=
                [[ $cmdline != *"$STATE/$id/"* ]] || continue # running: not stale
            fi
        fi
        log "$id: removing $file, left by pid ${pid:-?}, which is gone"
        rm -f "$file"
    done
}

# Create ID's directory, make sure nothing else holds its ports, start it (its kind's start).
start_server() {
    local id=$1 port
    mkdir -p "$STATE/$id"
    clear_stale_lock_files "$id"
    # Something else on our ports would answer our health checks in our server's place.
    netns_ensure "$id"
    for port in $(all_ports "$id"); do
        if port_open "$port" "$(host_of "$id")"; then
            die "$id: port $(host_of "$id"):$port is already in use by another process (see: ss -ltnp | grep :$port)"
        fi
    done
    log "starting $id on $(address "$id")"
    kind_call "$id" start
}

show_log() { # last lines of a server's log, on stderr
    local id=$1 lines=${2:-40}
    local logf="$STATE/$id/server.log"
    if [[ -f $logf ]]; then
        printf -- '----- last %s lines of %s -----\n' "$lines" "$logf" >&2 || true
        tail -n "$lines" "$logf" >&2 || true
        printf -- '----- end of %s -----\n' "$logf" >&2 || true
    else
        log "($id has no log at $logf)"
    fi
}

# Wait until server $1 is gone (no live process of ours behind its pid file), at most $2 s.
wait_gone() {
    local id=$1 deadline=$((SECONDS + $2))
    while owned_pid "$id" >/dev/null; do
        ((SECONDS < deadline)) || return 1
        sleep 0.1
    done
}

# The signal that stops server $1 gracefully (P_stop_signal, else TERM).
stop_signal() {
    local kind=${KIND_OF[$1]:-}
    if [[ -n $kind ]] && declare -F "${kind//-/_}_stop_signal" >/dev/null; then
        "${kind//-/_}_stop_signal" "$1"
    else
        echo TERM
    fi
}

# Send SIGTERM (or the kind's stop signal; +SIGCONT, so a paused server can act on it), SIGKILL
# after the grace period.
terminate() {
    local id=$1 pid
    pid=$(owned_pid "$id") || {
        rm -f "$STATE/$id/pid"
        return 0
    }
    kill -"$(stop_signal "$id")" "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true
    if ! wait_gone "$id" "$GRACE_SECS"; then
        log "$id (pid $pid) still running ${GRACE_SECS}s after SIGTERM: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone "$id" 10 || die "$id (pid $pid) survived SIGKILL"
    fi
    rm -f "$STATE/$id/pid"
}

# SIGTERM (or their stop signal; +SIGCONT) the given servers together, wait for them (SIGKILL after the grace
# period); prints how many there were.
terminate_all() {
    local id pid deadline live=()
    for id in "$@"; do
        if pid=$(owned_pid "$id"); then
            log "stopping $id (pid $pid)"
            kill -"$(stop_signal "$id")" "$pid" 2>/dev/null || true
            kill -CONT "$pid" 2>/dev/null || true
            live+=("$id")
        fi
    done
    deadline=$((SECONDS + GRACE_SECS))
    for id in "${live[@]}"; do
        wait_gone "$id" $((deadline > SECONDS ? deadline - SECONDS : 0)) || true
        if pid=$(owned_pid "$id"); then
            log "$id (pid $pid) still running ${GRACE_SECS}s after SIGTERM: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            wait_gone "$id" 10 || die "$id (pid $pid) survived SIGKILL; $STATE left in place"
        fi
    done
    echo "${#live[@]}"
}

# Serialize up/down/start/stop on the state directory (concurrent `up`s would race).
take_lock() {
    mkdir -p "$STATE"
    exec 9>"$STATE/.lock"
    flock -w $((WAIT_SECS * 3)) 9 || die "another scripts/backends holds $STATE/.lock"
}

# --- installation -------------------------------------------------------------------------

# Requirements: Debian PACKAGE is installed by `up` when the check fails (see the kinds'
# interface above). The same package may be named by several checks.
need_check() {
    NEED_FN+=("$1") NEED_ARG+=("") NEED_PKG+=("$2") NEED_WHAT+=("$3")
}
need_command() {
    NEED_FN+=(have_command) NEED_ARG+=("$1") NEED_PKG+=("$2") NEED_WHAT+=("$1")
}
need_file() {
    NEED_FN+=(have_file) NEED_ARG+=("$1") NEED_PKG+=("$2") NEED_WHAT+=("$1")
}
have_command() { command -v "$1" >/dev/null; }
have_file() { [[ -e $1 ]]; }
need_ok() { "${NEED_FN[$1]}" ${NEED_ARG[$1]:+"${NEED_ARG[$1]}"} >/dev/null; } # requirement $1 met?

# Needed whatever the kinds: launch/take_lock, the etcd leader lookup and scripts/bench.
need_command setsid util-linux
need_command flock util-linux
need_command awk mawk
# Not for the servers but for building the workspace (scripts/test, scripts/bench, cargo):
# the etcd-client crate's build script runs protoc on etcd's .proto files, which import
# protoc's well-known types (google/protobuf/*.proto): protobuf-compiler has protoc only,
# the .proto files are in libprotobuf-dev (a mere Recommends, which --no-install-recommends
# leaves out). rustc links with `cc` (gcc; crt1.o and libc from libc6-dev, again only a
# Recommends of gcc), and the ring crate compiles C with it. cargo downloads crates over HTTPS.
# check_build_deps below tests that these really work.
need_command protoc protobuf-compiler
need_file /usr/include/google/protobuf/descriptor.proto libprotobuf-dev
need_command cc gcc
need_file /usr/include/stdio.h libc6-dev
need_file /etc/ssl/certs/ca-certificates.crt ca-certificates
# lockbench's PostgreSQL peer (the distributed-lock-postgres crate) uses sqlx with native-tls,
# whose openssl-sys build script finds OpenSSL's headers and library with pkg-config.
need_command pkg-config pkg-config
need_file /usr/include/openssl/ssl.h libssl-dev
# The CLI's test that a program on file:// runs under valgrind (cli/tests/cli_file.rs), and
# scripts/instructions' callgrind counts.
need_command valgrind valgrind

# Install (apt-get) whatever is missing; nothing at all (not even `apt-get update`) when
# everything is there. Checked by the binaries and files we actually use.
ensure_installed() {
    local i pkgs=() pkg
    declare -A seen=()
    for i in "${!NEED_FN[@]}"; do
        need_ok "$i" && continue
        pkg=${NEED_PKG[$i]}
        [[ -n ${seen[$pkg]:-} ]] || pkgs+=("$pkg")
        seen[$pkg]=1
    done
    ((${#pkgs[@]})) || return 0

    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || die "must install ${pkgs[*]}: run as root or install sudo"
        sudo=(sudo)
    fi
    command -v apt-get >/dev/null || die "must install ${pkgs[*]} but there is no apt-get"
    log "installing: ${pkgs[*]} (apt-get update first)"
    # Debian may start system services on install (redis on 6379, etcd on 2379): harmless,
    # we never use those ports nor those processes.
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get -o DPkg::Lock::Timeout=300 update -q >&2 ||
        die "apt-get update failed"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${pkgs[@]}" >&2 ||
        die "apt-get install ${pkgs[*]} failed"

    for i in "${!NEED_FN[@]}"; do
        need_ok "$i" || die "${NEED_WHAT[$i]} is still missing after apt-get install ${NEED_PKG[$i]}"
    done
}

# Can this machine build the workspace with every feature? Compiles and links a C program
# with `cc`, and runs protoc (PROTOC if set, as prost-build does) on a .proto that imports
# google/protobuf/descriptor.proto, with -I PROTOC_INCLUDE if set (prost-build adds it, and
# fails if it is not a directory). One line on stderr per problem; exit status 1 if any.
check_build_deps() {
    local tmp protoc=${PROTOC:-protoc} why out bad=0
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/backends-build-deps.XXXXXX") || die "mktemp failed"

    if ! command -v cargo >/dev/null; then
        log "error: cargo is not on PATH: install the Rust toolchain with rustup (https://rustup.rs)"
        bad=1
    fi

    echo 'int main(void) { return 0; }' >"$tmp/check.c"
    if ! out=$(cc -o "$tmp/check" "$tmp/check.c" 2>&1); then
        if command -v cc >/dev/null; then why="cc cannot link a C program: ${out%%$'\n'*}"; else why="there is no cc"; fi
        log "error: no working C compiler (rustc links with cc, the ring crate compiles C): $why; install gcc libc6-dev (Debian/Ubuntu) or xcode-select --install (macOS)"
        bad=1
    fi

    echo 'syntax = "proto3"; import "google/protobuf/descriptor.proto"; message Check { google.protobuf.FileDescriptorProto d = 1; }' >"$tmp/check.proto"
    why=""
    if ! command -v "$protoc" >/dev/null; then
        why="${PROTOC:+PROTOC=}$protoc not found"
    elif [[ -n ${PROTOC_INCLUDE:-} && ! -d $PROTOC_INCLUDE ]]; then
        why="PROTOC_INCLUDE=$PROTOC_INCLUDE is not a directory"
    elif ! out=$("$protoc" -I "$tmp" ${PROTOC_INCLUDE:+-I "$PROTOC_INCLUDE"} -o /dev/null "$tmp/check.proto" 2>&1); then
        why="$protoc: ${out%%$'\n'*}"
    fi
    if [[ -n $why ]]; then
        log "error: protoc (the etcd feature's build needs it) cannot compile a .proto importing google/protobuf/descriptor.proto: $why; install protobuf-compiler libprotobuf-dev (Debian/Ubuntu) or brew install protobuf (macOS), or set PROTOC / PROTOC_INCLUDE"
        bad=1
    fi

    if ! command -v pkg-config >/dev/null || ! pkg-config --exists openssl; then
        log "error: pkg-config cannot find OpenSSL (lockbench's postgres peer, sqlx with native-tls, builds openssl-sys): install pkg-config libssl-dev (Debian/Ubuntu) or brew install openssl pkg-config (macOS)"
        bad=1
    fi

    rm -rf -- "$tmp"
    return "$bad"
}

# --- readiness ----------------------------------------------------------------------------

is_ready() { kind_call "$1" ready; }

# Wait until every server named answers; fail early if one exits, with its log.
wait_ready() {
    local deadline=$((SECONDS + WAIT_SECS)) pending=("$@") left id
    while ((${#pending[@]})); do
        left=()
        for id in "${pending[@]}"; do
            if is_ready "$id"; then
                log "$id ready at $(address "$id")"
            elif ! owned_pid "$id" >/dev/null; then
                log "$id ($(address "$id")) exited while starting"
                show_log "$id"
                die "$id failed to start; scripts/backends down cleans up"
            else
                left+=("$id")
            fi
        done
        pending=("${left[@]}")
        ((${#pending[@]})) || break
        if ((SECONDS >= deadline)); then
            for id in "${pending[@]}"; do
                log "$id ($(address "$id")) did not answer within ${WAIT_SECS}s"
                show_log "$id"
            done
            die "timed out waiting for: ${pending[*]}; scripts/backends down cleans up"
        fi
        sleep 0.2
    done
}

# One pass over the members of leader group $1: print the id of the one that says it is the
# leader. Only running, answering members are asked.
find_leader() {
    local id kind
    for id in ${GROUP_MEMBERS[$1]:-}; do
        owned_pid "$id" >/dev/null || continue
        kind=${KIND_OF[$id]}
        if "${kind//-/_}_is_leader" "$id"; then
            echo "$id"
            return 0
        fi
    done
    return 1
}

# --- network namespaces -------------------------------------------------------------------

# The netns mode (LOCKSMITH_BACKENDS_NETNS=1): host_of, netns_ids, isolate/heal.
# shellcheck source=backends.d/netns.sh disable=SC1091 # followed with shellcheck -x
source "$BACKENDS_LIB/netns.sh"

# The shifted-clock mode (LOCKSMITH_BACKENDS_CLOCKS=1): clock_ids, `clock ID MS`.
# shellcheck source=backends.d/clocks.sh disable=SC1091 # followed with shellcheck -x
source "$BACKENDS_LIB/clocks.sh"

# --- TLS ----------------------------------------------------------------------------------

# The secure servers' throw-away CA (tls_ensure, TLS_DIR) and their URLs (tls_url).
# shellcheck source=backends.d/tls.sh disable=SC1091 # followed with shellcheck -x
source "$BACKENDS_LIB/tls.sh"
