/*
 * clockshift.so — an LD_PRELOAD shim that shifts a process's wall clock by an offset the test
 * suite moves while it runs: the clock-jump faults of the tests (docs/reliability.md, "Clock
 * jumps"). Debian's libfaketime hangs Debian's redis-server at start-up (recursive calls to
 * clock_gettime); this shim never calls back into libc's clocks: it reads the real time with the
 * clock_gettime system call.
 *
 * The offset: a number of milliseconds (negative: the clock stepped back) in the file named by
 * CLOCKSHIFT_FILE, read again at most every 20 ms of real time. Shifted: CLOCK_REALTIME (and its
 * _COARSE form), gettimeofday, time. Monotonic clocks are left alone, as a real step leaves them.
 *
 * Build: cc -shared -fPIC -O2 -o clockshift.so clockshift.c
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ms;
static long long next_read_ns;

static int real_clock(clockid_t id, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, id, ts);
}

static long long offset(void) {
    struct timespec mono;
    real_clock(CLOCK_MONOTONIC, &mono);
    long long now = mono.tv_sec * 1000000000LL + mono.tv_nsec;
    if (now >= next_read_ns) {
        next_read_ns = now + 20000000LL;
        const char *path = getenv("CLOCKSHIFT_FILE");
        FILE *f = path ? fopen(path, "r") : NULL;
        if (f) {
            long long v;
            if (fscanf(f, "%lld", &v) == 1) offset_ms = v;
            fclose(f);
        }
    }
    return offset_ms;
}

static void shift(struct timespec *ts) {
    long long ns = ts->tv_sec * 1000000000LL + ts->tv_nsec + offset() * 1000000LL;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int r = real_clock(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int r = real_clock(CLOCK_REALTIME, &ts);
    if (r == 0) {
        shift(&ts);
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return r;
}

time_t time(time_t *out) {
    struct timespec ts;
    real_clock(CLOCK_REALTIME, &ts);
    shift(&ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
