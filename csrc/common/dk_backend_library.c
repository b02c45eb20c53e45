/* dk_backend_library.c — loading backend libraries (dk_backend_library.h). */
#include "dk_backend_library.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dk_backend_private.h"
#include "dk_keys_private.h"
#include "dk_op_private.h"

/* Serialises loads (a second load of one path waits, then finds it loaded). Not the registry
 * lock: an entry point registers things, which takes that one. */
static pthread_mutex_t dk__load_mutex = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local bool dk__tls_in_entry;
static pthread_once_t dk__load_atfork_once = PTHREAD_ONCE_INIT;

/* fork(): as the registry lock (Note [The registry lock]); installed after it, so its prepare
 * handler runs first and the two are taken in the order a load takes them. */
static void dk__load_lock(void) { pthread_mutex_lock(&dk__load_mutex); }
static void dk__load_unlock(void) { pthread_mutex_unlock(&dk__load_mutex); }
static void dk__load_atfork(void) { pthread_atfork(dk__load_lock, dk__load_unlock, dk__load_unlock); }

/* Note [A failed load leaves nothing behind]: undo, newest first. */
static void dk__undo(dk__journal *j, dk_keyset claimed, int entry)
{
    for (int i = j->n - 1; i >= 0; i--) (void)dk_unregister(j->handles[i]); /* stale handles are refused */
    dk__backend_list_remove(entry);
    for (dk_key k = 0; k < DK_NUM_KEYS; k++)
        if (dk_keyset_has(claimed, k)) dk__key_release(k);
}

static dk_status dk__run_entry(dk_status (*init)(void), const char *name, const char *path)
{
    int entry = dk__backend_list_add_library(name, path);
    if (entry < 0) return dk_error(DK_ENOMEM, "cannot load backend '%s': too many backends", path);
    dk__journal journal = {NULL, 0, 0, false};
    dk__journal *outer = dk__journal_swap(&journal);
    dk_keyset outer_keys = dk__keys_claimed_swap(0);
    dk__backend_loading(entry);
    dk__tls_in_entry = true;
    /* A failure without a message of its own must not be reported with an earlier one. */
    dk_clear_error();
    dk_status st = init();
    dk__tls_in_entry = false;
    dk__backend_loading(-1);
    dk_keyset claimed = dk__keys_claimed_swap(outer_keys);
    dk__journal_swap(outer);
    if (st == DK_OK) dk__backend_list_note_keys(entry, claimed);
    if (st != DK_OK) {
        char why[512];
        if (dk_last_error()[0])
            snprintf(why, sizeof why, "%s", dk_last_error());
        else
            snprintf(why, sizeof why, "its entry point returned %s without a message", dk_status_name(st));
        dk__undo(&journal, claimed, entry);
        st = dk_error(st, "backend '%s' (%s) failed to initialise: %s%s", name, path, why,
                      journal.overflow ? " [out of memory recording its registrations: some may remain]" : "");
    }
    free(journal.handles);
    return st;
}

dk_status dk_load_backend(const char *path)
{
    if (!path || !path[0]) return dk_error(DK_EINVAL, "dk_load_backend: empty path");
    if (dk__tls_in_entry)
        return dk_error(DK_EINVAL, "cannot load backend '%s' from inside another backend's entry point", path);
    struct stat sb;
    if (stat(path, &sb) != 0) return dk_error(DK_ENOENT, "cannot load backend '%s': no such file", path);

    dk_status st = DK_OK;
    pthread_once(&dk__load_atfork_once, dk__load_atfork);
    pthread_mutex_lock(&dk__load_mutex);
    if (dk__backend_list_has_path(path)) goto done;
    /* RTLD_LOCAL: backends see libdkit (their DT_NEEDED) but not each other's symbols. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        st = dk_error(DK_ENOENT, "cannot load backend '%s': %s", path, dlerror());
        goto done;
    }
    const uint32_t *abi = (const uint32_t *)dlsym(h, "dk_backend_abi_version");
    dk_status (*init)(void) = NULL;
    *(void **)&init = dlsym(h, "dk_backend_init");
    const char *name = (const char *)dlsym(h, "dk_backend_name");
    if (!abi || !init || !name) {
        st = dk_error(DK_EINVAL,
                      "cannot load backend '%s': not a dkit backend (missing entry point %s; define it with DK_BACKEND_ENTRY)",
                      path, !abi ? "dk_backend_abi_version" : !init ? "dk_backend_init" : "dk_backend_name");
        goto done;
    }
    if (*abi != DK_ABI_VERSION) {
        st = dk_error(DK_EABI, "cannot load backend '%s': built for dkit ABI %u, this dkit has ABI %u", path, *abi,
                      DK_ABI_VERSION);
        goto done;
    }
    st = dk__run_entry(init, name, path);
done:
    pthread_mutex_unlock(&dk__load_mutex);
    return st;
}
