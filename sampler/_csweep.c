/* rdmascope.sampler._csweep: the compiled sweep (optional; sampler/csweep.py falls back to the
 * pure-Python reader when this is not built or RDMASCOPE_NO_CEXT is set).
 *
 * One function, run(): waits for absolute deadlines start + k * interval on CLOCK_MONOTONIC
 * (clock_nanosleep TIMER_ABSTIME, optional busy spin), skips deadlines passed entirely (the rule
 * of sampler/loop.py), and per sweep preads every open descriptor at offset 0 into a fixed
 * buffer, brackets each read with clock_gettime before and after, parses the decimal value the
 * way sampler/reader.py does (blanks " \t\n" stripped at both ends, then only ASCII digits, at
 * most 2^64 - 1), and stores one row per counter into caller-owned column buffers. No Python
 * object is made per reading; the GIL is released for the whole call.
 *
 * Policy stays in Python (CounterReader): the call returns before a sweep that has a liveness
 * check due (Python runs the checks, then calls again for that sweep), and after a sweep in which
 * a read failed or a counter changed state (Python reports it, backs off, closes), so every
 * decision is Python's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define READ_SIZE 64
#define FD_PAUSED (-2)

/* statuses: rdmascope.capture STATUS_* (csweep.load() checks they agree) */
#define ST_OK 0
#define ST_READ_ERROR 1
#define ST_PARSE_ERROR 2
#define ST_MISSING 3

/* why run() returned */
#define R_UNTIL 0     /* the time given as `until` has passed (after at least one sweep) */
#define R_END 1       /* no deadlines left (n_deadlines reached) */
#define R_CHECK 2     /* a liveness check is due: sweep k not taken (Python checks first) */
#define R_ATTENTION 3 /* the last sweep has a failed read or a state change */
#define R_FULL 4      /* the row buffers cannot hold another sweep */
#define R_SIGNAL 5    /* the wait was interrupted by a signal: Python runs its handlers */

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* 0: slept to t; -1: interrupted by a signal handler */
static int sleep_until(int64_t t) {
    struct timespec ts = {(time_t)(t / 1000000000LL), (long)(t % 1000000000LL)};
    int rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    return rc == EINTR ? -1 : 0;
}

/* Parse like reader.py: strip " \t\n" at both ends, then 1+ ASCII digits, value <= 2^64-1.
 * Returns ST_OK (value in *out) or ST_PARSE_ERROR. */
static int parse_u64(const char *b, ssize_t n, uint64_t *out) {
    ssize_t lo = 0, hi = n;
    while (lo < hi && (b[lo] == ' ' || b[lo] == '\t' || b[lo] == '\n')) lo++;
    while (hi > lo && (b[hi - 1] == ' ' || b[hi - 1] == '\t' || b[hi - 1] == '\n')) hi--;
    if (lo == hi) return ST_PARSE_ERROR;
    uint64_t v = 0;
    for (ssize_t j = lo; j < hi; j++) {
        unsigned c = (unsigned char)b[j] - '0';
        if (c > 9) return ST_PARSE_ERROR;
        if (v > (UINT64_MAX - c) / 10) return ST_PARSE_ERROR; /* beyond u64, as reader.py */
        v = v * 10 + c;
    }
    *out = v;
    return ST_OK;
}

static int is_gone(int e) { return e == ENOENT || e == ENODEV || e == ESTALE || e == ENXIO; }

typedef struct {
    Py_buffer b;
    int held;
} buf_t;

static int get_buf(PyObject *o, buf_t *bt, Py_ssize_t itemsize, Py_ssize_t min_items, int writable,
                   const char *name) {
    if (PyObject_GetBuffer(o, &bt->b, (writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) | PyBUF_FORMAT)
        < 0)
        return -1;
    bt->held = 1;
    if (bt->b.itemsize != itemsize || bt->b.len < min_items * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: need %zd items of %zd bytes, got %zd bytes of "
                     "itemsize %zd", name, min_items, itemsize, bt->b.len, bt->b.itemsize);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(run_doc,
"run(fds, state, skipped, cid, sweep, t_before, dur, value, status, starts, errnos, t1s, raw,\n"
"    rawlen, start_ns, interval_ns, k, n_deadlines, until_ns, check_at, spin_ns)\n"
"-> (reason, k, taken, missed, n_sweeps_stored, n_bad)\n\n"
"Sweep counters at deadlines start_ns + k * interval_ns from deadline k on (see the module\n"
"comment in _csweep.c and sampler/csweep.py). fds: int32[n] (-1 missing, -2 backing off);\n"
"state: uint8[n] last reported status; skipped: int64[n] incremented per skipped read; rows go\n"
"to cid (uint16), sweep (int64), t_before (int64), dur (uint32), value (uint64), status (uint8)\n"
"from index 0, one sweep start per sweep to starts (int64); the capacity in sweeps is\n"
"len(starts). Per counter, for the last sweep: errnos (int32, 0 = none), t1s (int64, clock\n"
"after the read), raw (n * 64 bytes read) and rawlen (int32). n_deadlines < 0: unbounded.\n"
"check_at: int64[1], read before every sweep (another thread may lower it): return R_CHECK\n"
"before a sweep whose start is at or after it. progress (optional int64[1]): the rows stored\n"
"so far, updated after every reading, so another thread can take the readings of a call\n"
"whose read hangs.");

static PyObject *run(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[16];
    long long start, interval, k, n_deadlines, until, spin;
    o[15] = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOLLLLLOL|O", &o[0], &o[1], &o[2], &o[3], &o[4],
                          &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13],
                          &start, &interval, &k, &n_deadlines, &until, &o[14], &spin, &o[15]))
        return NULL;
    if (interval <= 0) {
        PyErr_SetString(PyExc_ValueError, "interval_ns must be > 0");
        return NULL;
    }
    buf_t bt[16];
    memset(bt, 0, sizeof bt);
    PyObject *result = NULL;
    Py_ssize_t n, cap;
    /* sizes: n from fds, capacity (sweeps) from starts */
    if (get_buf(o[0], &bt[0], 4, 0, 0, "fds") < 0) goto done;
    n = bt[0].b.len / 4;
    if (get_buf(o[9], &bt[9], 8, 0, 1, "starts") < 0) goto done;
    cap = bt[9].b.len / 8;
    {
        static const char *names[] = {"fds", "state", "skipped", "cid", "sweep", "t_before",
                                      "dur", "value", "status", "starts", "errnos", "t1s",
                                      "raw", "rawlen", "check_at"};
        const Py_ssize_t isz[] = {4, 1, 8, 2, 8, 8, 4, 8, 1, 8, 4, 8, 1, 4, 8};
        const Py_ssize_t cnt[] = {n, n, n, cap * n, cap * n, cap * n, cap * n, cap * n,
                                  cap * n, cap, n, n, n * READ_SIZE, n, 1};
        for (int j = 1; j < 15; j++) {
            if (j == 9) continue;
            if (get_buf(o[j], &bt[j], isz[j], cnt[j], j != 1 && j != 14, names[j]) < 0)
                goto done;
        }
        if (o[15] != NULL && o[15] != Py_None &&
            get_buf(o[15], &bt[15], 8, 1, 1, "progress") < 0)
            goto done;
    }
    {
        const int32_t *fds = bt[0].b.buf;
        const uint8_t *state = bt[1].b.buf;
        int64_t *skipped = bt[2].b.buf;
        uint16_t *o_cid = bt[3].b.buf;
        int64_t *o_sweep = bt[4].b.buf, *o_tb = bt[5].b.buf;
        uint32_t *o_dur = bt[6].b.buf;
        uint64_t *o_val = bt[7].b.buf;
        uint8_t *o_st = bt[8].b.buf;
        int64_t *o_starts = bt[9].b.buf;
        int32_t *errnos = bt[10].b.buf;
        int64_t *t1s = bt[11].b.buf;
        char *raw = bt[12].b.buf;
        int32_t *rawlen = bt[13].b.buf;
        /* another thread may lower it while this runs (a renamed device to re-open at once) */
        const int64_t *check_at = bt[14].b.buf;
        /* rows stored so far, for a thread that takes the readings of a call whose read hangs */
        int64_t *progress = bt[15].held ? (int64_t *)bt[15].b.buf : NULL;
        int reason = R_END;
        long long taken = 0, missed = 0, n_bad = 0;
        Py_ssize_t pos = 0, stored = 0;

        Py_BEGIN_ALLOW_THREADS
        for (;;) {
            if (n_deadlines >= 0 && k >= n_deadlines) { reason = R_END; break; }
            if (stored >= cap) { reason = R_FULL; break; }
            int64_t deadline = start + k * interval;
            int64_t t = now_ns();
            if (taken > 0 && t >= until) { reason = R_UNTIL; break; }
            if (t < deadline) {
                if (deadline - spin > t && sleep_until(deadline - spin) < 0) {
                    reason = R_SIGNAL;
                    break;
                }
                t = now_ns();
                while (t < deadline) t = now_ns();
            }
            if (t - deadline >= interval) { /* the next deadline(s) passed too: skip them */
                int64_t m = (t - start) / interval;
                if (n_deadlines >= 0 && m >= n_deadlines) {
                    missed += n_deadlines - k;
                    k = n_deadlines;
                    reason = R_END;
                    break;
                }
                missed += m - k;
                k = m;
            }
            if (t >= __atomic_load_n(check_at, __ATOMIC_RELAXED)) { reason = R_CHECK; break; }
            int attention = 0;
            for (Py_ssize_t i = 0; i < n; i++) {
                int fd = fds[i];
                int64_t t0 = now_ns(), t1 = t0;
                uint64_t v = 0;
                int st, e = 0;
                if (fd >= 0) {
                    char *b = raw + i * READ_SIZE;
                    ssize_t r;
                    do {
                        r = pread(fd, b, READ_SIZE, 0);
                    } while (r < 0 && errno == EINTR);
                    if (r < 0) e = errno;
                    t1 = now_ns();
                    if (r < 0) {
                        st = is_gone(e) ? ST_MISSING : ST_READ_ERROR;
                        rawlen[i] = 0;
                        attention = 1;
                    } else {
                        rawlen[i] = (int32_t)r;
                        st = parse_u64(b, r, &v);
                        if (st != ST_OK) { v = 0; attention = 1; }
                        else if (state[i] != ST_OK) attention = 1; /* recovered */
                    }
                } else if (fd == FD_PAUSED) { /* backing off: not read, still unknown */
                    st = state[i];
                    skipped[i]++;
                } else {
                    st = ST_MISSING;
                }
                errnos[i] = e;
                t1s[i] = t1;
                if (i == 0) o_starts[stored] = t0;
                o_cid[pos] = (uint16_t)i;
                o_sweep[pos] = k;
                o_tb[pos] = t0;
                int64_t d = t1 - t0;
                o_dur[pos] = d < 4294967295LL ? (uint32_t)d : 4294967295U;
                o_val[pos] = v;
                o_st[pos] = (uint8_t)st;
                if (st) n_bad++;
                pos++;
                if (progress) __atomic_store_n(progress, (int64_t)pos, __ATOMIC_RELEASE);
            }
            stored++;
            taken++;
            k++;
            if (attention) { reason = R_ATTENTION; break; }
        }
        Py_END_ALLOW_THREADS
        result = Py_BuildValue("iLLLnL", reason, k, taken, missed, stored, n_bad);
    }
done:
    for (int j = 0; j < 16; j++)
        if (bt[j].held) PyBuffer_Release(&bt[j].b);
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS, run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_csweep",
    "The compiled sweep of rdmascope record (see sampler/csweep.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__csweep(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "READ_SIZE", READ_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "HAS_PROGRESS", 1) < 0 ||
        PyModule_AddIntConstant(m, "R_UNTIL", R_UNTIL) < 0 ||
        PyModule_AddIntConstant(m, "R_END", R_END) < 0 ||
        PyModule_AddIntConstant(m, "R_CHECK", R_CHECK) < 0 ||
        PyModule_AddIntConstant(m, "R_ATTENTION", R_ATTENTION) < 0 ||
        PyModule_AddIntConstant(m, "R_FULL", R_FULL) < 0 ||
        PyModule_AddIntConstant(m, "R_SIGNAL", R_SIGNAL) < 0 ||
        PyModule_AddIntConstant(m, "STATUS_OK", ST_OK) < 0 ||
        PyModule_AddIntConstant(m, "STATUS_READ_ERROR", ST_READ_ERROR) < 0 ||
        PyModule_AddIntConstant(m, "STATUS_PARSE_ERROR", ST_PARSE_ERROR) < 0 ||
        PyModule_AddIntConstant(m, "STATUS_MISSING", ST_MISSING) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
