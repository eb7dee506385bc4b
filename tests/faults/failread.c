/* LD_PRELOAD shim for the fault tests: make pread() of chosen files fail with a chosen errno,
 * as a kernel whose counter query fails would (EINVAL, EACCES, EIO ...), without root tricks.
 *
 * Environment (read on every call, so a test can switch it on and off):
 *   RDMASCOPE_FAIL_MATCH  substring of the file path (/proc/self/fd/N) whose reads fail
 *   RDMASCOPE_FAIL_ERRNO  errno to fail with (decimal, default EINVAL)
 *   RDMASCOPE_FAIL_WHILE  optional: fail only while this file exists
 *   RDMASCOPE_FAIL_COUNT  optional: a file whose first 20 bytes hold the number of failed reads
 *   RDMASCOPE_HANG_MATCH  substring of the file path whose reads *hang* instead (then succeed),
 *                         as an mlx5 firmware command that takes seconds (command timeout 60 s)
 *   RDMASCOPE_HANG_MS     how long one such read hangs (ms, default 3000); the wait restarts
 *                         after a signal, like an uninterruptible firmware command
 *   RDMASCOPE_HANG_WHILE  optional: hang only while this file exists
 *   RDMASCOPE_HANG_ONCE   optional: if set, only the first matching read hangs
 *   RDMASCOPE_READ_CLOCK  optional: a file whose first 8 bytes (mapped shared, so they survive
 *                         a kill -9) hold the CLOCK_MONOTONIC ns at which the last pread of
 *                         any file returned: when the recorder last took a reading
 * Build: cc -shared -fPIC -O2 -o failread.so failread.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);
static pread_fn real_pread;
static long n_failed;

static int should_fail(int fd) {
    const char *match = getenv("RDMASCOPE_FAIL_MATCH");
    if (!match || !*match) return 0;
    const char *cond = getenv("RDMASCOPE_FAIL_WHILE");
    if (cond && *cond && access(cond, F_OK) != 0) return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return strstr(path, match) != NULL;
}

static void count(void) {
    const char *cf = getenv("RDMASCOPE_FAIL_COUNT");
    if (!cf || !*cf) return;
    n_failed++;
    int fd = open(cf, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    char buf[32];
    int len = snprintf(buf, sizeof buf, "%20ld\n", n_failed);
    if (!real_pread) real_pread = (pread_fn)dlsym(RTLD_NEXT, "pread");
    (void)!pwrite(fd, buf, (size_t)len, 0);
    close(fd);
}

static int matches(int fd, const char *match) {
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return strstr(path, match) != NULL;
}

static int hung_once;

static void maybe_hang(int fd) {
    const char *match = getenv("RDMASCOPE_HANG_MATCH");
    if (!match || !*match) return;
    const char *cond = getenv("RDMASCOPE_HANG_WHILE");
    if (cond && *cond && access(cond, F_OK) != 0) return;
    if (getenv("RDMASCOPE_HANG_ONCE") && hung_once) return;
    if (!matches(fd, match)) return;
    hung_once = 1;
    const char *ms = getenv("RDMASCOPE_HANG_MS");
    long total = (ms && *ms) ? atol(ms) : 3000;
    struct timespec ts = {total / 1000, (total % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int64_t *clock_slot;
static int clock_tried;

static void stamp(void) {
    if (!clock_tried) {
        clock_tried = 1;
        const char *p = getenv("RDMASCOPE_READ_CLOCK");
        if (p && *p) {
            int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
            if (fd >= 0) {
                if (ftruncate(fd, 8) == 0) {
                    void *m = mmap(NULL, 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                    if (m != MAP_FAILED) clock_slot = (int64_t *)m;
                }
                close(fd);
            }
        }
    }
    if (!clock_slot) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    __atomic_store_n(clock_slot, (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec, __ATOMIC_RELEASE);
}

static ssize_t fake(int fd, void *buf, size_t n, off_t off) {
    if (!real_pread) real_pread = (pread_fn)dlsym(RTLD_NEXT, "pread");
    maybe_hang(fd);
    if (should_fail(fd)) {
        const char *e = getenv("RDMASCOPE_FAIL_ERRNO");
        int err = (e && *e) ? atoi(e) : EINVAL;
        count();
        errno = err;
        stamp();
        return -1;
    }
    ssize_t r = real_pread(fd, buf, n, off);
    stamp();
    return r;
}

ssize_t pread(int fd, void *buf, size_t n, off_t off) { return fake(fd, buf, n, off); }
ssize_t pread64(int fd, void *buf, size_t n, off_t off) { return fake(fd, buf, n, off); }
