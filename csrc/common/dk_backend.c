/* dk_backend.c — loading backend shared libraries, and the list of backends. */
#include "dk_backend.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dk_internal.h"

#define DK__MAX_BACKENDS 32

static dk_backend_info dk__backends[DK__MAX_BACKENDS];
static int dk__nbackends;

void dk__backend_note_builtin(const char *name)
{
    dk__lock();
    if (dk__nbackends < DK__MAX_BACKENDS) dk__backends[dk__nbackends++] = (dk_backend_info){name, NULL};
    dk__unlock();
}


int dk_backend_count(void)
{
    dk__lock();
    int n = dk__nbackends;
    dk__unlock();
    return n;
}

dk_backend_info dk_backend_at(int i)
{
    dk_backend_info info = {NULL, NULL};
    dk__lock();
    if (i >= 0 && i < dk__nbackends) info = dk__backends[i];
    dk__unlock();
    return info;
}

static bool dk__already_loaded(const char *path)
{
    for (int i = 0; i < dk__nbackends; i++)
        if (dk__backends[i].path && strcmp(dk__backends[i].path, path) == 0) return true;
    return false;
}

dk_status dk_load_backend(const char *path)
{
    if (!path || !path[0]) return dk_error(DK_EINVAL, "dk_load_backend: empty path");
    struct stat sb;
    if (stat(path, &sb) != 0) return dk_error(DK_ENOENT, "cannot load backend '%s': no such file", path);

    dk_status st = DK_OK;
    dk__lock(); /* held across the entry so two loads of one backend cannot interleave */
    if (dk__already_loaded(path)) goto done;
    if (dk__nbackends == DK__MAX_BACKENDS) {
        st = dk_error(DK_ENOMEM, "cannot load backend '%s': %d backends already loaded", path, DK__MAX_BACKENDS);
        goto done;
    }
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
        /* Not ours: safe to unload, nothing of it was registered through an entry point.
         * (Constructor registrations are refused on ABI mismatch; see dk__register_device_impl.) */
        goto done;
    }
    if (*abi != DK_ABI_VERSION) {
        st = dk_error(DK_EABI, "cannot load backend '%s': built for dkit ABI %u, this dkit has ABI %u", path, *abi,
                      DK_ABI_VERSION);
        goto done;
    }
    st = init();
    if (st) {
        char why[512];
        strncpy(why, dk_last_error(), sizeof why - 1);
        why[sizeof why - 1] = '\0';
        st = dk_error(st, "backend '%s' (%s) failed to initialise: %s", name, path, why);
        goto done;
    }
    char *copy = strdup(path);
    if (!copy) {
        st = dk_error(DK_ENOMEM, "out of memory loading '%s'", path);
        goto done;
    }
    dk__backends[dk__nbackends++] = (dk_backend_info){name, copy};
done:
    dk__unlock();
    return st;
}
