# shellcheck shell=bash
# scripts/backends.d/clocks.sh — the shifted-clock mode: the servers whose leases live on their
# wall clock (the single Redis, the Redis quorum's masters, the standalone ZooKeeper) run under
# clockshift.so (clockshift.c beside this file, an LD_PRELOAD shim), and `clock ID MS` steps
# ID's wall clock to MS milliseconds from the true time while it runs: the fault suite's clock
# jumps (clock-jump). Sourced by lib.sh.
#
# Chosen by LOCKSMITH_BACKENDS_CLOCKS=1 (or `auto`: on wherever cc builds the shim, as it does
# wherever the workspace builds) at `up`; stored in the state directory like the port offset.
# Off by default: the servers then read the real clock, as always.

CLOCKS=$(stored_setting LOCKSMITH_BACKENDS_CLOCKS clocks) || exit 1
[[ $CLOCKS != auto ]] || CLOCKS=1
CLOCKS=${CLOCKS:-0}
[[ $CLOCKS == [01] ]] || {
    echo "backends: error: LOCKSMITH_BACKENDS_CLOCKS must be 0, 1 or auto" >&2
    exit 1
}
readonly CLOCKS
readonly CLOCK_SHIM=$STATE/clockshift.so

CLOCK_IDS=() # the ids that run under the shim in this mode (clock_ids)

# clock_ids ID...: a kind's servers whose wall clock the clock mode can step.
clock_ids() { CLOCK_IDS+=("$@"); }

has_clock() { ((CLOCKS == 1)) && [[ " ${CLOCK_IDS[*]} " == *" $1 "* ]]; }

clock_file() { echo "$STATE/$1/clock-offset"; }

# The command prefix that runs ID under the shim (nothing for other servers); builds the shim and
# sets ID's offset to 0 (a start is on the true time).
clock_exec() {
    has_clock "$1" || return 0
    if [[ ! -s $CLOCK_SHIM ]]; then
        cc -shared -fPIC -O2 -o "$CLOCK_SHIM" "$BACKENDS_LIB/clockshift.c" >&2 ||
            die "clocks: building $CLOCK_SHIM with cc failed"
    fi
    echo 0 >"$(clock_file "$1")"
    echo "env LD_PRELOAD=$CLOCK_SHIM CLOCKSHIFT_FILE=$(clock_file "$1")"
}

# clock ID MS: step ID's wall clock to MS ms from the true time (the shim reads it within 20 ms).
cmd_clock() {
    local id=$1 ms=${2:-}
    ((CLOCKS == 1)) || die "clock: the servers were not started under the clock shim (LOCKSMITH_BACKENDS_CLOCKS=1 scripts/backends up)"
    has_clock "$id" || die "clock: $id does not run under the clock shim (those that do: ${CLOCK_IDS[*]})"
    [[ $ms =~ ^[+-]?[0-9]+$ ]] || die "clock: expected a number of milliseconds, got '$ms'"
    owned_pid "$id" >/dev/null || die "$id is not running (state dir $STATE)"
    echo "${ms#+}" >"$(clock_file "$id").tmp" && mv -f "$(clock_file "$id").tmp" "$(clock_file "$id")"
    log "$id's wall clock is $ms ms from the true time"
}
