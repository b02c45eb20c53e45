/*
 * test_abi.c — what DK_ABI_VERSION promises, checked.
 *
 * Note [The ABI fingerprint]
 * A backend library built against one dkit runs against another only if they agree on the layout
 * of every public struct, the values of every public enum and the status codes (README "The ABI
 * promise"). dk_load_backend compares DK_ABI_VERSION; this test makes the version honest: it
 * renders those layouts (sizes, offsets, enum values) into one string and compares it with the
 * string recorded for the current DK_ABI_VERSION. A change to any of them fails here until the
 * version is bumped in dk_export.h and the new fingerprint recorded below, so a layout can never
 * change under an unchanged version. Adding functions, ops or a vendor key changes nothing here and
 * needs no bump; argument lists are checked per registration instead (Note [Schemas are checked at
 * registration] in dk_registry.h).
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "dk_test.h"

typedef struct {
    char s[4096];
    size_t n;
} fp;

static void add(fp *f, const char *what, long long v)
{
    int w = snprintf(f->s + f->n, sizeof f->s - f->n, "%s=%lld ", what, v);
    assert_true(w > 0 && (size_t)w < sizeof f->s - f->n);
    f->n += (size_t)w;
}

#define SIZE(T) add(f, "sizeof(" #T ")", (long long)sizeof(T))
#define OFF(T, m) add(f, #T "." #m, (long long)offsetof(T, m))
#define VAL(e) add(f, #e, (long long)(e))

static void fingerprint(fp *f)
{
    f->n = 0;
    f->s[0] = '\0';
    /* DLPack's tensor, as dk_tensor */
    SIZE(dk_tensor);
    OFF(dk_tensor, data), OFF(dk_tensor, device), OFF(dk_tensor, ndim), OFF(dk_tensor, dtype);
    OFF(dk_tensor, shape), OFF(dk_tensor, strides), OFF(dk_tensor, byte_offset);
    /* values and the boxed stack */
    SIZE(dk_int_list), SIZE(dk_value), OFF(dk_value, u), SIZE(dk_stack), OFF(dk_stack, v), VAL(DK_STACK_MAX);
    VAL(DK_TYPE_NONE), VAL(DK_TYPE_TENSOR), VAL(DK_TYPE_INT), VAL(DK_TYPE_FLOAT), VAL(DK_TYPE_BOOL);
    VAL(DK_TYPE_STR), VAL(DK_TYPE_INT_LIST);
    /* the op, its arguments, kernels */
    SIZE(dk_arg_info), OFF(dk_arg_info, kind), OFF(dk_arg_info, out);
    VAL(DK_ARG_TENSOR), VAL(DK_ARG_OPT_TENSOR), VAL(DK_ARG_INT), VAL(DK_ARG_FLOAT), VAL(DK_ARG_BOOL);
    VAL(DK_ARG_STR), VAL(DK_ARG_INT_LIST);
    SIZE(dk_slot), SIZE(dk_op), OFF(dk_op, args), OFF(dk_op, nargs), OFF(dk_op, unbox), OFF(dk_op, entry);
    OFF(dk_op, error_stub), OFF(dk_op, seq), OFF(dk_op, mask), OFF(dk_op, table), OFF(dk_op, priv);
    SIZE(dk_kernel), OFF(dk_kernel, boxed), OFF(dk_kernel, ctx), OFF(dk_kernel, name), OFF(dk_kernel, flags);
    VAL(DK_KERNEL_FALLTHROUGH), VAL(DK_NUM_KEYS), SIZE(dk_keyset), SIZE(dk_key);
    /* backends */
    SIZE(dk_backend), OFF(dk_backend, name), OFF(dk_backend, device_type), OFF(dk_backend, ctx);
    OFF(dk_backend, available), OFF(dk_backend, device_count), OFF(dk_backend, get_device);
    OFF(dk_backend, set_device), OFF(dk_backend, synchronize), OFF(dk_backend, alloc), OFF(dk_backend, free);
    OFF(dk_backend, copy);
    VAL(DK_COPY_HOST_TO_DEVICE), VAL(DK_COPY_DEVICE_TO_HOST), VAL(DK_COPY_DEVICE_TO_DEVICE);
    SIZE(dk_backend_info), OFF(dk_backend_info, path), OFF(dk_backend_info, key), OFF(dk_backend_info, backend);
    SIZE(dk_device_guard);
    /* introspection and profiles */
    SIZE(dk_table_entry), OFF(dk_table_entry, provenance), OFF(dk_table_entry, kernel_name);
    OFF(dk_table_entry, boxed);
    VAL(DK_PROV_MISSING), VAL(DK_PROV_KERNEL), VAL(DK_PROV_COMPOSITE), VAL(DK_PROV_FALLBACK);
    VAL(DK_PROV_FALLTHROUGH), VAL(DK_PROV_CPU_COPY);
    SIZE(dk_profile_row), OFF(dk_profile_row, backend), OFF(dk_profile_row, count);
    OFF(dk_profile_row, total_ns);
    /* statuses */
    VAL(DK_OK), VAL(DK_EINVAL), VAL(DK_ETYPE), VAL(DK_EINDEX), VAL(DK_ENOTIMPL), VAL(DK_EBUFFER);
    VAL(DK_ENOMEM), VAL(DK_ENOENT), VAL(DK_EABI), VAL(DK_ERUNTIME);
}

/* FNV-1a: the recorded value stays one line; a mismatch prints the whole rendering. */
static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The fingerprint of each ABI on x86-64 Linux (LP64; other targets print theirs and skip). */
static const struct {
    unsigned abi;
    uint64_t fingerprint;
} recorded[] = {
    {2, 0xbcf2c40e1e452be0ull},
};

static void layouts_match_the_recorded_fingerprint_of_this_abi(void **state)
{
    (void)state;
    fp f;
    fingerprint(&f);
#if !(defined(__x86_64__) && defined(__linux__))
    fprintf(stderr, "ABI fingerprint %#llx on this target (recorded for x86-64 Linux only):\n%s\n",
            (unsigned long long)fnv1a(f.s), f.s);
    skip();
#endif
    for (size_t i = 0; i < DK_COUNTOF(recorded); i++)
        if (recorded[i].abi == DK_ABI_VERSION) {
            if (recorded[i].fingerprint != fnv1a(f.s)) {
                fprintf(stderr, "%s\n", f.s);
                fail_msg("a public layout changed under DK_ABI_VERSION %u (Note [The ABI fingerprint]): bump "
                         "DK_ABI_VERSION in dk_export.h and record fingerprint %#llx (of the layouts printed above) "
                         "in tests/c/test_abi.c",
                         DK_ABI_VERSION, (unsigned long long)fnv1a(f.s));
            }
            return;
        }
    fprintf(stderr, "%s\n", f.s);
    fail_msg("no fingerprint recorded for DK_ABI_VERSION %u: record %#llx in tests/c/test_abi.c", DK_ABI_VERSION,
             (unsigned long long)fnv1a(f.s));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(layouts_match_the_recorded_fingerprint_of_this_abi),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
