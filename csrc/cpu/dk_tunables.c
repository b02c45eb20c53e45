/* dk_tunables.c — the list of tunables (Note [Tunables] in dk_tunables.h). */
#include "dk_tunables.h"

#include <pthread.h>
#include <string.h>

static dk_tunable_def *dk__tunables;
static pthread_mutex_t dk__tunables_mutex = PTHREAD_MUTEX_INITIALIZER;

void dk__tunable_register(dk_tunable_def *t)
{
    pthread_mutex_lock(&dk__tunables_mutex);
    t->next = dk__tunables;
    dk__tunables = t;
    pthread_mutex_unlock(&dk__tunables_mutex);
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
