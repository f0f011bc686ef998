/* A slow disk, emulated for benchmarks (bench/slow_disk.py).
 *
 * Loaded with LD_PRELOAD into a private PostgreSQL cluster, it makes every fsync, fdatasync and
 * syncfs take SLOW_SYNC_US microseconds longer than the real call: a commit then waits as it
 * would on a disk whose flush is that slow, while every other read and write stays as fast as
 * this machine's. The real call still runs first, so nothing about durability changes. Unset or
 * 0: no delay.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

static long delay_us = -1;

static void slow_down(void) {
    if (delay_us < 0) {
        const char *value = getenv("SLOW_SYNC_US");
        delay_us = value ? atol(value) : 0;
    }
    if (delay_us > 0) {
        struct timespec pause = {delay_us / 1000000, (delay_us % 1000000) * 1000};
        while (nanosleep(&pause, &pause) == -1 && errno == EINTR) {
        }
    }
}

#define SLOWED(name)                                              \
    int name(int fd) {                                            \
        static int (*real)(int) = 0;                              \
        if (!real)                                                \
            real = (int (*)(int))dlsym(RTLD_NEXT, #name);         \
        int rc = real(fd);                                        \
        slow_down();                                              \
        return rc;                                                \
    }

SLOWED(fsync)
SLOWED(fdatasync)
SLOWED(syncfs)
