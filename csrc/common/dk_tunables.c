/* dk_tunables.c — the list of tunables (Note [Tunables] in dk_tunables.h). */
#include "dk_tunables.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dk_tunable_def *dk__tunables;
static pthread_mutex_t dk__tunables_mutex = PTHREAD_MUTEX_INITIALIZER;

/* Note [DKIT_TUNE]
 * DKIT_TUNE="name=value,name=value" in the environment sets tunables when the library loads
 * (roi_align.gpu_deterministic=1, host_cache.max_bytes=0, ...). Each tunable looks for its own
 * name as it registers, so the order of the library's constructors does not matter. Values are
 * decimal integers (host_cache.max_bytes=010 is ten, not eight; 0x10 is refused): a value that
 * is not one, or is outside the tunable's range, is reported on stderr and ignored; so is a name
 * no tunable has (checked by dk_tunables_check_env, which _C runs at import). */
static bool dk__env_value(const char *name, int64_t *value, bool *bad)
{
    const char *env = getenv("DKIT_TUNE");
    *bad = false;
    if (!env) return false;
    const size_t len = strlen(name);
    bool found = false;
    for (const char *p = env; *p;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        if ((size_t)(end - p) > len && strncmp(p, name, len) == 0 && p[len] == '=') {
            char buf[32];
            const size_t n = (size_t)(end - p) - len - 1;
            char *stop;
            errno = 0;
            if (n > 0 && n < sizeof buf) {
                memcpy(buf, p + len + 1, n);
                buf[n] = '\0';
                const long long v = strtoll(buf, &stop, 10);
                if (errno == 0 && *stop == '\0') {
                    *value = v; /* the last one wins */
                    found = true;
                    *bad = false;
                } else {
                    *bad = true;
                }
            } else {
                *bad = true;
            }
        }
        p = *end ? end + 1 : end;
    }
    return found;
}

void dk__tunable_register(dk_tunable_def *t)
{
    int64_t v;
    bool bad;
    if (dk__env_value(t->name, &v, &bad)) {
        if (v >= t->min && v <= t->max) t->value = v;
        else
            fprintf(stderr, "dkit: DKIT_TUNE: %s=%lld is outside [%lld, %lld]; ignored\n", t->name, (long long)v,
                    (long long)t->min, (long long)t->max);
    } else if (bad) {
        fprintf(stderr, "dkit: DKIT_TUNE: the value of %s is not a decimal integer; ignored\n", t->name);
    }
    pthread_mutex_lock(&dk__tunables_mutex);
    t->next = dk__tunables;
    dk__tunables = t;
    pthread_mutex_unlock(&dk__tunables_mutex);
}

int dk_tunables_check_env(void)
{
    const char *env = getenv("DKIT_TUNE");
    int unknown = 0;
    if (!env) return 0;
    pthread_mutex_lock(&dk__tunables_mutex);
    for (const char *p = env; *p;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        const size_t len = eq ? (size_t)(eq - p) : (size_t)(end - p);
        bool known = false;
        for (dk_tunable_def *t = dk__tunables; t && !known; t = t->next)
            known = strlen(t->name) == len && strncmp(t->name, p, len) == 0;
        if (!known && len > 0) {
            fprintf(stderr, "dkit: DKIT_TUNE: no tunable named '%.*s'; ignored\n", (int)len, p);
            unknown++;
        }
        p = *end ? end + 1 : end;
    }
    pthread_mutex_unlock(&dk__tunables_mutex);
    return unknown;
}

static dk_tunable_def *dk__find(const char *name)
{
    dk_tunable_def *t = dk__tunables;
    while (t && strcmp(t->name, name) != 0) t = t->next;
    return t;
}

dk_status dk_tunable_set(const char *name, int64_t value, int64_t *previous)
{
    if (!name) return dk_error(DK_EINVAL, "dk_tunable_set: name is NULL");
    pthread_mutex_lock(&dk__tunables_mutex);
    dk_tunable_def *t = dk__find(name);
    dk_status st = DK_OK;
    if (!t) {
        st = dk_error(DK_ENOENT, "no tunable named '%s'", name);
    } else if (value < t->min || value > t->max) {
        st = dk_error(DK_EINVAL, "tunable '%s' must be in [%lld, %lld], got %lld", name, (long long)t->min,
                      (long long)t->max, (long long)value);
    } else {
        if (previous) *previous = dk_tunable(t);
        __atomic_store_n(&t->value, value, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&dk__tunables_mutex);
    return st;
}

dk_status dk_tunable_get(const char *name, int64_t *value)
{
    if (!name || !value) return dk_error(DK_EINVAL, "dk_tunable_get: NULL argument");
    pthread_mutex_lock(&dk__tunables_mutex);
    dk_tunable_def *t = dk__find(name);
    if (t) *value = dk_tunable(t);
    pthread_mutex_unlock(&dk__tunables_mutex);
    return t ? DK_OK : dk_error(DK_ENOENT, "no tunable named '%s'", name);
}

void dk_tunables_reset(void)
{
    pthread_mutex_lock(&dk__tunables_mutex);
    for (dk_tunable_def *t = dk__tunables; t; t = t->next) __atomic_store_n(&t->value, t->def, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&dk__tunables_mutex);
}
