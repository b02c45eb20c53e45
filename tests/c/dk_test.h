/*
 * dk_test.h — shared helpers for dkit's cmocka tests.
 *
 *  - cmocka's includes, in the order it needs them;
 *  - DLTensors over local buffers, on the CPU or on a fake device (data is a poison pointer:
 *    nothing in the core may dereference it);
 *  - capture of dkit warnings (dk_set_warning_handler) and of stderr, so tests can assert them;
 *  - a thread-local log that kernels append their names to, so tests can assert call order;
 *  - the "probe" op (opt in with #define DKT_DEFINE_PROBE before including this header): the
 *    smallest op with a required tensor, an optional tensor and an int, plus logging kernels.
 *
 * Each test executable is one translation unit, so defining an op here is fine.
 */
#ifndef DK_TEST_H
#define DK_TEST_H

/* cmocka needs these first. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dkit.h"

/* ------------------------------------------------------------------------------------------ */
/* Tensors                                                                                    */

/* A tensor plus storage for its shape and strides. Do not copy it (t points into itself). */
typedef struct {
    dk_tensor t;
    int64_t shape[8];
    int64_t strides[8];
} dkt_tensor;

/* Data of tensors on fake devices: dereferencing it crashes, which is the point. Each fake tensor
 * gets its own address (DKT_FAKE_DATA plus 4 KiB steps), so that the core's aliasing check (Note
 * [Aliasing] in dk_check.h) sees distinct tensors as distinct memory, as real ones are. */
#define DKT_FAKE_DATA ((void *)(uintptr_t)0xdead0000u)
static inline void *dkt_fake_data(void)
{
    static _Thread_local uintptr_t next;
    next = (next + 1) % 4096;
    return (void *)((uintptr_t)DKT_FAKE_DATA + next * 4096u);
}

/* DKT_DIMS(2, 3, 4) expands to the two arguments `ndim, shape`. */
#define DKT_DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), ((const int64_t[]){__VA_ARGS__})
#define DKT_STRIDES(...) ((const int64_t[]){__VA_ARGS__})

static inline dk_tensor *dkt_tensor_init(dkt_tensor *tt, void *data, DLDeviceType type, int32_t id, dk_dtype dt,
                                         int ndim, const int64_t *shape, const int64_t *strides)
{
    memset(tt, 0, sizeof *tt);
    assert_true(ndim >= 0 && ndim <= 8);
    tt->t.data = data;
    tt->t.device.device_type = type;
    tt->t.device.device_id = id;
    tt->t.ndim = ndim;
    tt->t.dtype = dk_dtype_to_dl(dt);
    for (int i = 0; i < ndim; i++) tt->shape[i] = shape[i];
    tt->t.shape = tt->shape;
    if (strides) {
        for (int i = 0; i < ndim; i++) tt->strides[i] = strides[i];
        tt->t.strides = tt->strides;
    }
    return &tt->t;
}

/* Row-major tensor over a host buffer. */
static inline dk_tensor *dkt_cpu(dkt_tensor *tt, void *data, dk_dtype dt, int ndim, const int64_t *shape)
{
    return dkt_tensor_init(tt, data, kDLCPU, 0, dt, ndim, shape, NULL);
}

/* A float32 [1] tensor on any device; its data is never to be read. */
static inline dk_tensor *dkt_on(dkt_tensor *tt, DLDeviceType type, int32_t id)
{
    static const int64_t one[1] = {1};
    return dkt_tensor_init(tt, dkt_fake_data(), type, id, DK_FLOAT32, 1, one, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* Warnings                                                                                   */

typedef struct {
    pthread_mutex_t mu;
    int count;
    char last[1024];
    char all[16384];
} dkt__warnings;

static dkt__warnings dkt__w = {PTHREAD_MUTEX_INITIALIZER, 0, {0}, {0}};

static void dkt__warning_handler(const char *message, void *ctx)
{
    (void)ctx;
    pthread_mutex_lock(&dkt__w.mu);
    dkt__w.count++;
    snprintf(dkt__w.last, sizeof dkt__w.last, "%s", message);
    size_t used = strlen(dkt__w.all);
    if (used + 2 < sizeof dkt__w.all) snprintf(dkt__w.all + used, sizeof dkt__w.all - used, "%s\n", message);
    pthread_mutex_unlock(&dkt__w.mu);
}

/* Start capturing warnings (and forget earlier ones). */
static inline void dkt_warnings_capture(void)
{
    pthread_mutex_lock(&dkt__w.mu);
    dkt__w.count = 0;
    dkt__w.last[0] = '\0';
    dkt__w.all[0] = '\0';
    pthread_mutex_unlock(&dkt__w.mu);
    dk_set_warning_handler(dkt__warning_handler, NULL);
}

static inline void dkt_warnings_release(void) { dk_set_warning_handler(NULL, NULL); }

static inline int dkt_warning_count(void)
{
    pthread_mutex_lock(&dkt__w.mu);
    int n = dkt__w.count;
    pthread_mutex_unlock(&dkt__w.mu);
    return n;
}

/* Not thread-safe against concurrent warnings; read it after the threads that warn are done. */
static inline const char *dkt_warning_last(void) { return dkt__w.last; }
static inline const char *dkt_warnings_all(void) { return dkt__w.all; }

/* cmocka group setup/teardown that keep override warnings out of the output. */
static inline int dkt_group_capture_warnings(void **state)
{
    (void)state;
    dkt_warnings_capture();
    return 0;
}
static inline int dkt_group_release_warnings(void **state)
{
    (void)state;
    dkt_warnings_release();
    return 0;
}

static inline void dkt_log_reset(void);

/* Per-test setup and teardown: a failed assertion jumps out of a test, which must not leave
 * this thread's include/exclude sets, tracing or log behind for the next test. */
static inline int dkt_reset_thread_state(void **state)
{
    (void)state;
    dk_tls_state none = {0, 0};
    dk_tls_pop(none);
    dk_dispatch_set_trace(false);
    dkt_log_reset();
    dk_clear_error();
    return 0;
}
#define dkt_test(f) cmocka_unit_test_setup_teardown(f, dkt_reset_thread_state, dkt_reset_thread_state)

/* ------------------------------------------------------------------------------------------ */
/* stderr capture (for dispatch traces)                                                       */

typedef struct {
    int saved;
    FILE *tmp;
} dkt_stderr_capture;

static inline void dkt_stderr_begin(dkt_stderr_capture *c)
{
    fflush(stderr);
    c->tmp = tmpfile();
    assert_non_null(c->tmp);
    c->saved = dup(2);
    assert_true(c->saved >= 0);
    assert_true(dup2(fileno(c->tmp), 2) >= 0);
}

/* Restores stderr and returns what was written to it; free() it. */
static inline char *dkt_stderr_end(dkt_stderr_capture *c)
{
    fflush(stderr);
    assert_true(dup2(c->saved, 2) >= 0);
    close(c->saved);
    long n = ftell(c->tmp);
    assert_true(n >= 0);
    char *s = (char *)calloc(1, (size_t)n + 1);
    assert_non_null(s);
    rewind(c->tmp);
    size_t got = fread(s, 1, (size_t)n, c->tmp);
    s[got] = '\0';
    fclose(c->tmp);
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* A thread-local call log: kernels append their names, tests compare the whole string.       */

static _Thread_local char dkt__log[2048];

static inline void dkt_log_reset(void) { dkt__log[0] = '\0'; }
static inline void dkt_log(const char *what)
{
    size_t used = strlen(dkt__log);
    snprintf(dkt__log + used, sizeof dkt__log - used, "%s%s", used ? "," : "", what);
}
static inline const char *dkt_log_str(void) { return dkt__log; }

/* Boxed kernels usable with any op; ctx is the name they log. */
static inline dk_status dkt_boxed_log(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)op;
    (void)ks;
    (void)stack;
    dkt_log((const char *)ctx);
    return DK_OK;
}

static inline dk_status dkt_boxed_log_redispatch(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    dkt_log((const char *)ctx);
    return dk_op_redispatch_boxed(op, ks, stack);
}

/* Claims a functionality key by name, asserting success. */
static inline dk_key dkt_func_key(const char *name)
{
    dk_key k = DK_KEY_UNDEFINED;
    assert_int_equal(dk_functionality_key_register(name, &k), DK_OK);
    assert_true(k >= DK_KEY_FUNC_FIRST && k <= DK_KEY_FUNC_LAST);
    return k;
}

#define assert_ok(expr)                                                                                  \
    do {                                                                                                 \
        dk_status dkt__st = (expr);                                                                      \
        if (dkt__st != DK_OK) fail_msg("%s -> %s: %s", #expr, dk_status_name(dkt__st), dk_last_error()); \
    } while (0)

/* Asserts a status and the exact error message. */
#define assert_error(expr, status, message)                                   \
    do {                                                                      \
        dk_clear_error();                                                     \
        dk_status dkt__st = (expr);                                           \
        assert_string_equal(dk_status_name(dkt__st), dk_status_name(status)); \
        assert_string_equal(dk_last_error(), (message));                      \
    } while (0)

/* ------------------------------------------------------------------------------------------ */
/* The probe op                                                                                */

#ifdef DKT_DEFINE_PROBE
#define DKT_PROBE_ARGS(X) \
    X(TENSOR, a)          \
    X(OPT_TENSOR, b)      \
    X(INT, n)

DK_DECLARE_OP(probe, DKT_PROBE_ARGS)
DK_DEFINE_OP(probe, DKT_PROBE_ARGS)
{
    (void)a;
    (void)b;
    if (n < 0) return dk_error(DK_EINVAL, "probe: n must be >= 0, got %lld", (long long)n);
    return DK_OK;
}

/* Typed probe kernels that log their name. */
#define DKT_PROBE_KERNEL(fname, label)                                        \
    static dk_status fname(const dk_tensor *a, const dk_tensor *b, int64_t n) \
    {                                                                         \
        (void)a;                                                              \
        (void)b;                                                              \
        (void)n;                                                              \
        dkt_log(label);                                                       \
        return DK_OK;                                                         \
    }

/* Calls probe(a, b, 0) and returns the log it produced ("" on failure, with the status in st). */
static inline const char *dkt_probe_run(const dk_tensor *a, const dk_tensor *b, dk_status *st)
{
    dkt_log_reset();
    dk_clear_error();
    dk_status s = dk_probe(a, b, 0);
    if (st) *st = s;
    return dkt_log_str();
}
#endif

#endif /* DK_TEST_H */
