/* dk_export.h — symbol visibility, ABI version and small compiler helpers shared by every header. */
#ifndef DK_EXPORT_H
#define DK_EXPORT_H

/*
 * The ABI version of the core library. A backend library records the value it was built with
 * (DK_BACKEND_ENTRY) and dk_load_backend refuses a mismatch. Bump it whenever a public struct
 * layout (dk_op, dk_kernel, dk_value, dk_backend, dk_backend_info) or a calling convention changes.
 */
#define DK_ABI_VERSION 2u

#define DK_VERSION_STRING "0.1.0"

/* The core library is built with -fvisibility=hidden; only DK_API names are exported. */
#if defined(__GNUC__)
#define DK_API __attribute__((visibility("default")))
#define DK_LIKELY(x) __builtin_expect(!!(x), 1)
#define DK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define DK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define DK_API
#define DK_LIKELY(x) (x)
#define DK_UNLIKELY(x) (x)
#define DK_PRINTF(f, a)
#endif

#define DK_COUNTOF(a) (sizeof(a) / sizeof((a)[0]))

/* Function attributes the generated code and the core rely on (GCC and Clang). */
#if defined(__GNUC__)
#define DK__NOINLINE __attribute__((noinline))
#define DK__ALWAYS_INLINE __attribute__((always_inline))
#define DK__CONSTRUCTOR(fn)                                  \
    static void fn(void) __attribute__((constructor, used)); \
    static void fn(void)
#else
#error "dkit needs a compiler with __attribute__((constructor))"
#endif

#endif /* DK_EXPORT_H */
