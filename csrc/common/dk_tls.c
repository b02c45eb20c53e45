/* dk_tls.c — the thread-local key sets and their scopes (dk_tls.h). */
#include "dk_tls.h"

#include <pthread.h>
#include <stdlib.h>

_Thread_local dk_tls_state dk__tls DK__TLS_MODEL;

/*
 * A thread that has entered a scope gets a record, in a list other threads can reach (under
 * dk__scopes_mutex, which also guards every record): its push/pop state (`base`), its live scopes,
 * and where its dk__tls is. Threads that never enter a scope have no record, and their push/pop
 * touches dk__tls alone, as before scopes existed.
 */
typedef struct {
    dk_tls_scope id;
    dk_keyset include, exclude;
} dk__scope;

typedef struct dk__tls_record {
    struct dk__tls_record *prev, *next;
    dk_tls_state *tls; /* the owning thread's dk__tls */
    dk_tls_state base; /* the push/pop layer */
    dk__scope *scopes;
    int n, cap;
} dk__tls_record;

static pthread_mutex_t dk__scopes_mutex = PTHREAD_MUTEX_INITIALIZER;
static dk__tls_record *dk__records;
static dk_tls_scope dk__next_scope = 1;
static _Thread_local dk__tls_record *dk__tls_rec;
static pthread_key_t dk__rec_key;
static pthread_once_t dk__rec_key_once = PTHREAD_ONCE_INIT;

static void dk__store(dk_tls_state *t, dk_tls_state v)
{
    __atomic_store_n(&t->included, v.included, __ATOMIC_RELAXED);
    __atomic_store_n(&t->excluded, v.excluded, __ATOMIC_RELAXED);
}

static dk_tls_state dk__load(const dk_tls_state *t)
{
    dk_tls_state v = {__atomic_load_n(&t->included, __ATOMIC_RELAXED), __atomic_load_n(&t->excluded, __ATOMIC_RELAXED)};
    return v;
}

/* The thread's sets from its record: the push/pop layer plus every live scope. Mutex held. */
static void dk__recompute(dk__tls_record *r)
{
    dk_tls_state v = r->base;
    for (int i = 0; i < r->n; i++) {
        v.included |= r->scopes[i].include;
        v.excluded |= r->scopes[i].exclude;
    }
    dk__store(r->tls, v);
}

/* At thread exit: its scopes end with it. */
static void dk__record_free(void *p)
{
    dk__tls_record *r = (dk__tls_record *)p;
    pthread_mutex_lock(&dk__scopes_mutex);
    if (r->prev) r->prev->next = r->next;
    else dk__records = r->next;
    if (r->next) r->next->prev = r->prev;
    pthread_mutex_unlock(&dk__scopes_mutex);
    free(r->scopes);
    free(r);
}

/* fork(): only the forking thread lives on in the child; the others' records are left unlinked
 * (their memory stays: it belongs to the parent's threads). */
static void dk__scopes_lock(void) { pthread_mutex_lock(&dk__scopes_mutex); }
static void dk__scopes_unlock(void) { pthread_mutex_unlock(&dk__scopes_mutex); }
static void dk__scopes_child(void)
{
    dk__records = dk__tls_rec;
    if (dk__tls_rec) dk__tls_rec->prev = dk__tls_rec->next = NULL;
    pthread_mutex_unlock(&dk__scopes_mutex);
}

static void dk__rec_key_create(void)
{
    pthread_key_create(&dk__rec_key, dk__record_free);
    pthread_atfork(dk__scopes_lock, dk__scopes_unlock, dk__scopes_child);
}

/* Mutex held. */
static dk__tls_record *dk__record_of_this_thread(void)
{
    if (dk__tls_rec) return dk__tls_rec;
    dk__tls_record *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->tls = &dk__tls;
    r->base = dk__load(&dk__tls);
    r->next = dk__records;
    if (dk__records) dk__records->prev = r;
    dk__records = r;
    dk__tls_rec = r;
    pthread_setspecific(dk__rec_key, r);
    return r;
}

dk_tls_state dk_tls_get(void) { return dk__load(&dk__tls); }

/* The push/pop layer: dk__tls itself for a thread without a record. */
static dk_tls_state dk__push(dk_keyset include, dk_keyset exclude)
{
    if (!dk__tls_rec) {
        dk_tls_state prev = dk__load(&dk__tls), next = {prev.included | include, prev.excluded | exclude};
        dk__store(&dk__tls, next);
        return prev;
    }
    pthread_mutex_lock(&dk__scopes_mutex);
    dk_tls_state prev = dk__tls_rec->base;
    dk__tls_rec->base.included |= include;
    dk__tls_rec->base.excluded |= exclude;
    dk__recompute(dk__tls_rec);
    pthread_mutex_unlock(&dk__scopes_mutex);
    return prev;
}

dk_tls_state dk_tls_push_include(dk_keyset ks) { return dk__push(ks, 0); }
dk_tls_state dk_tls_push_exclude(dk_keyset ks) { return dk__push(0, ks); }

void dk_tls_pop(dk_tls_state previous)
{
    if (!dk__tls_rec) {
        dk__store(&dk__tls, previous);
        return;
    }
    pthread_mutex_lock(&dk__scopes_mutex);
    dk__tls_rec->base = previous;
    dk__recompute(dk__tls_rec);
    pthread_mutex_unlock(&dk__scopes_mutex);
}

dk_status dk_tls_scope_enter(dk_keyset include, dk_keyset exclude, dk_tls_scope *out)
{
    if (!out) return dk_error(DK_EINVAL, "dk_tls_scope_enter: out is NULL");
    pthread_once(&dk__rec_key_once, dk__rec_key_create);
    pthread_mutex_lock(&dk__scopes_mutex);
    dk__tls_record *r = dk__record_of_this_thread();
    if (r && r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 8;
        dk__scope *s = realloc(r->scopes, (size_t)cap * sizeof *s);
        if (s) {
            r->scopes = s;
            r->cap = cap;
        }
    }
    if (!r || r->n == r->cap) {
        pthread_mutex_unlock(&dk__scopes_mutex);
        return dk_error(DK_ENOMEM, "dk_tls_scope_enter: out of memory");
    }
    dk__scope *s = &r->scopes[r->n++];
    s->id = dk__next_scope++;
    s->include = include;
    s->exclude = exclude;
    dk__recompute(r);
    *out = s->id;
    pthread_mutex_unlock(&dk__scopes_mutex);
    return DK_OK;
}

dk_status dk_tls_scope_exit(dk_tls_scope scope)
{
    pthread_mutex_lock(&dk__scopes_mutex);
    for (dk__tls_record *r = dk__records; r; r = r->next)
        for (int i = 0; i < r->n; i++) {
            if (r->scopes[i].id != scope) continue;
            r->scopes[i] = r->scopes[--r->n]; /* order does not matter: the sets are a union */
            dk__recompute(r);
            pthread_mutex_unlock(&dk__scopes_mutex);
            return DK_OK;
        }
    pthread_mutex_unlock(&dk__scopes_mutex);
    return dk_error(DK_EINVAL, "dk_tls_scope_exit: scope %llu is unknown, already ended, or its thread has exited",
                    (unsigned long long)scope);
}
