/*
 * dk_backend.c — backend objects (dk_backend.h): registering them, finding them by key or device,
 * the list of backends, the thread's current streams, and the device services kernels call.
 */
#include "dk_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dk_backend_private.h"
#include "dk_keys_private.h"
#include "dk_lock_private.h"
#include "dk_tensor.h"

#define DK__MAX_BACKENDS 32

/* Written under the registry lock; objects are read lock-free by calls. */
static const dk_backend *dk__objects[DK_NUM_KEYS];
static dk_backend_info dk__list[DK__MAX_BACKENDS];
/* The file each library entry was loaded from (Note [A library loads once]); zeros otherwise. */
static struct {
    uint64_t dev, ino;
} dk__files[DK__MAX_BACKENDS];
static int dk__nlist;
static _Thread_local int dk__tls_loading = -1;

void dk__backend_loading(int i) { dk__tls_loading = i; }

int dk__backend_list_add_library(const char *name, const char *path, uint64_t dev, uint64_t ino)
{
    char *copy = strdup(path);
    if (!copy) return -1;
    dk__lock();
    int i = dk__nlist < DK__MAX_BACKENDS ? dk__nlist++ : -1;
    if (i >= 0) {
        dk__list[i] = (dk_backend_info){name, copy, DK_KEY_UNDEFINED, NULL};
        dk__files[i].dev = dev;
        dk__files[i].ino = ino;
    }
    dk__unlock();
    if (i < 0) free(copy);
    return i;
}

bool dk__backend_list_has_file(const char *path, uint64_t dev, uint64_t ino)
{
    bool found = false;
    dk__lock();
    for (int i = 0; i < dk__nlist && !found; i++)
        found = dk__list[i].path &&
                (strcmp(dk__list[i].path, path) == 0 || (dk__files[i].dev == dev && dk__files[i].ino == ino));
    dk__unlock();
    return found;
}

void dk__backend_list_note_keys(int i, dk_keyset claimed)
{
    dk__lock();
    if (i >= 0 && i < dk__nlist && dk__list[i].key == DK_KEY_UNDEFINED) {
        for (dk_key k = DK_KEY_CPU; k <= DK_KEY_BACKEND_LAST; k++)
            if (dk_keyset_has(claimed, k)) {
                dk__list[i].key = k;
                break;
            }
    }
    dk__unlock();
}

/* Paths of removed entries, kept for a concurrent reader (as key names are, dk_keys.c). */
struct dk__retired_path {
    struct dk__retired_path *next;
    const char *path;
};
static struct dk__retired_path *dk__retired_paths;

void dk__backend_list_remove(int i)
{
    dk__lock();
    if (i >= 0 && i < dk__nlist) {
        struct dk__retired_path *r = dk__list[i].path ? malloc(sizeof *r) : NULL;
        if (r) {
            r->path = dk__list[i].path;
            r->next = dk__retired_paths;
            dk__retired_paths = r;
        }
        dk_key k = dk__list[i].key;
        if (k != DK_KEY_UNDEFINED && dk__objects[k] == dk__list[i].backend)
            __atomic_store_n(&dk__objects[k], NULL, __ATOMIC_RELEASE);
        memmove(&dk__list[i], &dk__list[i + 1], (size_t)(dk__nlist - i - 1) * sizeof dk__list[0]);
        memmove(&dk__files[i], &dk__files[i + 1], (size_t)(dk__nlist - i - 1) * sizeof dk__files[0]);
        dk__nlist--;
    }
    dk__unlock();
}

static dk_key dk__builtin_key(const char *name)
{
    if (strcmp(name, "cpu") == 0) return DK_KEY_CPU;
    if (strcmp(name, "cuda") == 0) return DK_KEY_CUDA;
    if (strcmp(name, "hip") == 0) return DK_KEY_HIP;
    return DK_KEY_UNDEFINED;
}

dk_status dk_backend_register(const dk_backend *b, dk_key *out)
{
    if (!b) return dk_error(DK_EINVAL, "dk_backend_register: backend is NULL");
    if (b->abi != DK_ABI_VERSION)
        return dk_error(DK_EABI, "backend '%s' was built for dkit ABI %u, this dkit has ABI %u",
                        b->name ? b->name : "?", b->abi, DK_ABI_VERSION);
    if (!b->name || !b->name[0]) return dk_error(DK_EINVAL, "dk_backend_register: the backend has no name");
    dk_key key = dk__builtin_key(b->name);
    if (key != DK_KEY_UNDEFINED) {
        if (dk_key_for_device_type(b->device_type) != key)
            return dk_error(DK_EINVAL, "backend '%s': DLPack device type %d is not the one of dkit's '%s' key", b->name,
                            (int)b->device_type, b->name);
    } else {
        dk_status st = dk_backend_key_register(b->name, b->device_type, &key);
        if (st) return st;
    }
    dk_status st = DK_OK;
    dk__lock();
    if (dk__objects[key] && dk__objects[key] != b) {
        st = dk_error(DK_EINVAL, "backend '%s': another backend object is already registered for key %s", b->name,
                      dk_key_name(key));
    } else if (!dk__objects[key]) {
        int i = dk__tls_loading;
        if (i < 0 || i >= dk__nlist || dk__list[i].backend) {
            i = dk__nlist < DK__MAX_BACKENDS ? dk__nlist++ : -1;
            if (i >= 0) dk__list[i] = (dk_backend_info){b->name, NULL, key, b};
        }
        if (i < 0) {
            st = dk_error(DK_ENOMEM, "backend '%s': %d backends are already registered", b->name, DK__MAX_BACKENDS);
        } else {
            dk__list[i].key = key;
            dk__list[i].backend = b;
            __atomic_store_n(&dk__objects[key], b, __ATOMIC_RELEASE);
        }
    }
    dk__unlock();
    if (!st && out) *out = key;
    return st;
}

const dk_backend *dk_backend_of_key(dk_key key)
{
    return key > DK_KEY_UNDEFINED && key < DK_NUM_KEYS ? __atomic_load_n(&dk__objects[key], __ATOMIC_ACQUIRE) : NULL;
}

const dk_backend *dk_backend_of_device(DLDevice device)
{
    return dk_backend_of_key(dk_key_for_device_type((int32_t)device.device_type));
}

int dk_backend_count(void)
{
    dk__lock();
    int n = dk__nlist;
    dk__unlock();
    return n;
}

dk_backend_info dk_backend_at(int i)
{
    dk_backend_info info = {NULL, NULL, DK_KEY_UNDEFINED, NULL};
    dk__lock();
    if (i >= 0 && i < dk__nlist) info = dk__list[i];
    dk__unlock();
    return info;
}

/* ------------------------------------------------------------------------------------------ */
/* Device services                                                                            */

static dk_status dk__no_backend(DLDevice device, const char *what)
{
    char d[64];
    return dk_error(DK_ENOTIMPL, "%s: no dkit backend object serves %s", what, dk_device_str(device, d, sizeof d));
}

dk_status dk_device_available(DLDevice device)
{
    const dk_backend *b = dk_backend_of_device(device);
    char d[64];
    if (!b) return dk__no_backend(device, "dk_device_available");
    if (b->available) {
        char why[256] = "";
        dk_status st = b->available(b->ctx, why, sizeof why);
        if (st)
            return dk_error(st, "%s: backend '%s' is unavailable: %s", dk_device_str(device, d, sizeof d), b->name,
                            why[0] ? why : "no reason given");
    }
    int n = b->device_count ? b->device_count(b->ctx) : 1;
    if (device.device_id < 0 || device.device_id >= n)
        return dk_error(DK_EINVAL, "%s: backend '%s' has %d device(s)", dk_device_str(device, d, sizeof d), b->name, n);
    return DK_OK;
}

/* Current streams: a few per thread (Note [The current stream]). A thread rarely uses more than
 * one device of one kind; DK__STREAMS entries hold any mix that a real program uses. */
#define DK__STREAMS 16
typedef struct {
    uint64_t device; /* the DLDevice as one word; 0 (device type 0, which DLPack leaves unused) marks a free entry */
    void *stream;
} dk__stream_entry;
static _Thread_local dk__stream_entry dk__tls_streams[DK__STREAMS];

static uint64_t dk__device_word(DLDevice d)
{
    uint64_t w;
    memcpy(&w, &d, sizeof w);
    return w;
}

void *dk_current_stream(DLDevice device)
{
    const uint64_t w = dk__device_word(device);
    for (int i = 0; i < DK__STREAMS; i++)
        if (dk__tls_streams[i].device == w) return dk__tls_streams[i].stream;
    return NULL;
}

dk_status dk_set_current_stream(DLDevice device, void *stream, void **previous)
{
    const uint64_t w = dk__device_word(device);
    int free_i = -1;
    for (int i = 0; i < DK__STREAMS; i++) {
        if (dk__tls_streams[i].device == w) {
            if (previous) *previous = dk__tls_streams[i].stream;
            if (stream) dk__tls_streams[i].stream = stream;
            else dk__tls_streams[i].device = 0; /* back to the default stream: free the entry */
            return DK_OK;
        }
        if (free_i < 0 && dk__tls_streams[i].device == 0) free_i = i;
    }
    if (previous) *previous = NULL;
    if (!stream) return DK_OK;
    if (dk_key_for_device_type((int32_t)device.device_type) == DK_KEY_CPU)
        return dk_error(DK_EINVAL, "dk_set_current_stream: cpu has no streams");
    if (w == 0) return dk_error(DK_EINVAL, "dk_set_current_stream: device type 0 is not a device");
    if (free_i < 0)
        return dk_error(DK_ENOMEM, "dk_set_current_stream: this thread already has %d current streams", DK__STREAMS);
    dk__tls_streams[free_i].device = w;
    dk__tls_streams[free_i].stream = stream;
    return DK_OK;
}

dk_status dk_device_alloc(DLDevice device, size_t bytes, void **out)
{
    const dk_backend *b = dk_backend_of_device(device);
    if (!b) return dk__no_backend(device, "dk_device_alloc");
    if (!b->alloc) return dk_error(DK_ENOTIMPL, "dk_device_alloc: backend '%s' has no allocator", b->name);
    dk_status st = b->alloc(b->ctx, device.device_id, bytes, dk_current_stream(device), out);
    if (st == DK_OK && !*out)
        return dk_error(DK_ERUNTIME, "dk_device_alloc: backend '%s' returned NULL for %zu bytes", b->name, bytes);
    return st;
}

void dk_device_free(DLDevice device, void *ptr)
{
    const dk_backend *b = dk_backend_of_device(device);
    if (b && b->free && ptr) b->free(b->ctx, device.device_id, ptr, dk_current_stream(device));
}

dk_status dk_device_copy(DLDevice device, void *dst, const void *src, size_t bytes, dk_copy_kind kind)
{
    const dk_backend *b = dk_backend_of_device(device);
    if (!b) return dk__no_backend(device, "dk_device_copy");
    if (!b->copy) {
        if (b->device_type != kDLCPU) return dk_error(DK_ENOTIMPL, "dk_device_copy: backend '%s' cannot copy", b->name);
        if (bytes) memmove(dst, src, bytes); /* host memory on both sides */
        return DK_OK;
    }
    return b->copy(b->ctx, device.device_id, dst, src, bytes, kind, dk_current_stream(device));
}

dk_status dk_device_synchronize(DLDevice device)
{
    const dk_backend *b = dk_backend_of_device(device);
    if (!b) return dk__no_backend(device, "dk_device_synchronize");
    return b->synchronize ? b->synchronize(b->ctx, device.device_id, dk_current_stream(device)) : DK_OK;
}

dk_status dk_device_guard_enter(dk_device_guard *g, DLDevice device)
{
    g->backend = dk_backend_of_device(device);
    g->previous = 0;
    g->switched = false;
    if (!g->backend) return dk__no_backend(device, "dk_device_guard_enter");
    const dk_backend *b = g->backend;
    if (!b->get_device || !b->set_device) return DK_OK; /* one device, or no notion of a current one */
    int32_t cur;
    dk_status st = b->get_device(b->ctx, &cur);
    if (st) return st;
    if (cur == device.device_id) return DK_OK;
    st = b->set_device(b->ctx, device.device_id);
    if (st) return st;
    g->previous = cur;
    g->switched = true;
    return DK_OK;
}

void dk_device_guard_exit(dk_device_guard *g)
{
    if (g->switched) (void)g->backend->set_device(g->backend->ctx, g->previous);
    g->switched = false;
}
