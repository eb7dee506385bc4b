/* Minimal C reference loop for benchmarks/bench_sampler.py.
 *
 * Does what rdmascope record does per sweep, nothing more: for each counter file (kept open),
 * clock_gettime(CLOCK_MONOTONIC) before and after a pread(fd, buf, 64, 0), parse the unsigned
 * integer, store (t_before, duration, value) in memory; sleeps to absolute deadlines
 * start + k * interval with clock_nanosleep(TIMER_ABSTIME); a late sweep skips the passed
 * deadlines (same rule as sampler/loop.py: a deadline passed entirely before the loop
 * gets to it is missed; the latest passed deadline is taken at once). Timer slack 1 ns.
 *
 * usage: c_sampler INTERVAL_NS DURATION_S FILE...
 * prints one JSON line: sweeps taken/missed, interval p50/p99/max (ns), lateness (first read of
 * sweep k minus deadline k) p50/p99/p99.9/max (ns), CPU seconds, wall seconds.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Peak RSS from /proc/self/status (VmHWM, kB): ru_maxrss would include the parent's RSS at
 * fork time (the benchmark forks this from a Python process). */
static long peak_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb;
}

static volatile sig_atomic_t stop = 0;
static void on_sig(int s) { (void)s; stop = 1; }

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s INTERVAL_NS DURATION_S FILE...\n", argv[0]);
        return 2;
    }
    int64_t interval = atoll(argv[1]);
    double duration = atof(argv[2]);
    int n = argc - 3;
    int *fds = calloc(n, sizeof(int));
    for (int i = 0; i < n; i++) {
        fds[i] = open(argv[3 + i], O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0) { perror(argv[3 + i]); return 1; }
    }
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    signal(SIGTERM, on_sig);
    signal(SIGINT, on_sig);
    int64_t n_deadlines = (int64_t)(duration * 1e9 / interval + 0.5);
    /* one batch of readings in memory, reused (the Python sampler hands batches to a writer) */
    size_t cap = 4096 * (size_t)n;
    int64_t *tb = malloc(cap * sizeof(int64_t));
    uint32_t *dur = malloc(cap * sizeof(uint32_t));
    uint64_t *val = malloc(cap * sizeof(uint64_t));
    int64_t *starts = malloc((size_t)(n_deadlines + 1) * sizeof(int64_t));
    int64_t *late = malloc((size_t)(n_deadlines + 1) * sizeof(int64_t)); /* first read - deadline */
    size_t pos = 0;
    int64_t taken = 0, missed = 0, k = 0;
    uint64_t checksum = 0;
    char buf[64];
    int64_t start = now_ns();
    while (!stop && k < n_deadlines) {
        int64_t deadline = start + k * interval;
        int64_t t = now_ns();
        if (t < deadline) {
            struct timespec ts = {deadline / 1000000000LL, deadline % 1000000000LL};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !stop) {}
            t = now_ns();
        }
        if (t - deadline >= interval) { /* passed the next deadline(s): skip, count missed */
            int64_t m = (t - start) / interval;
            missed += m - k;
            k = m;
        }
        for (int i = 0; i < n; i++) {
            int64_t t0 = now_ns();
            ssize_t r = pread(fds[i], buf, sizeof(buf) - 1, 0);
            int64_t t1 = now_ns();
            uint64_t v = 0;
            if (r > 0) { buf[r] = 0; v = strtoull(buf, NULL, 10); }
            if (i == 0) { starts[taken] = t0; late[taken] = t0 - (start + k * interval); }
            if (pos == cap) { for (size_t j = 0; j < cap; j++) checksum += val[j] + tb[j] + dur[j]; pos = 0; }
            tb[pos] = t0; dur[pos] = (uint32_t)(t1 - t0); val[pos] = v; pos++;
        }
        taken++;
        k++;
    }
    int64_t wall = now_ns() - start;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    int64_t ni = taken > 1 ? taken - 1 : 0;
    int64_t *iv = malloc((size_t)(ni + 1) * sizeof(int64_t));
    for (int64_t j = 0; j < ni; j++) iv[j] = starts[j + 1] - starts[j];
    qsort(iv, (size_t)ni, sizeof(int64_t), cmp64);
    int64_t p50 = ni ? iv[ni / 2] : 0, p99 = ni ? iv[(int64_t)(ni * 0.99)] : 0, mx = ni ? iv[ni - 1] : 0;
    qsort(late, (size_t)taken, sizeof(int64_t), cmp64);
    int64_t l50 = taken ? late[taken / 2] : 0, l99 = taken ? late[(int64_t)(taken * 0.99)] : 0;
    int64_t l999 = taken ? late[(int64_t)(taken * 0.999)] : 0, lmx = taken ? late[taken - 1] : 0;
    printf("{\"sweeps_taken\": %lld, \"sweeps_missed\": %lld, \"interval_p50_ns\": %lld, "
           "\"interval_p99_ns\": %lld, \"interval_max_ns\": %lld, \"cpu_s\": %.6f, \"wall_s\": %.6f, "
           "\"late_p50_ns\": %lld, \"late_p99_ns\": %lld, \"late_p999_ns\": %lld, "
           "\"late_max_ns\": %lld, \"max_rss_kb\": %ld, \"checksum\": %llu}\n",
           (long long)taken, (long long)missed, (long long)p50, (long long)p99, (long long)mx,
           cpu, wall / 1e9, (long long)l50, (long long)l99, (long long)l999, (long long)lmx,
           peak_rss_kb(), (unsigned long long)(checksum & 0xffff));
    return 0;
}
