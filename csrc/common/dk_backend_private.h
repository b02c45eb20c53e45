/* dk_backend_private.h — the backend list, for the loader (dk_backend_library.c) and dk_init.c.
 * Not installed. */
#ifndef DK_BACKEND_PRIVATE_H
#define DK_BACKEND_PRIVATE_H

#include "dk_backend.h"

/* Appends a library's entry (no key, no object yet), loaded from `path`, the file (dev, ino);
 * returns its index, or -1 when the list is full. The path is copied. */
int dk__backend_list_add_library(const char *name, const char *path, uint64_t dev, uint64_t ino);
/* Whether a library loaded from this path, or from this file by another path, is in the list
 * (Note [A library loads once] in dk_backend_library.c). */
bool dk__backend_list_has_file(const char *path, uint64_t dev, uint64_t ino);
/* A library that claimed backend keys but registered no object is listed under the first. */
void dk__backend_list_note_keys(int i, dk_keyset claimed);
/* Removes entry i and the backend objects registered while it loaded (the loader's undo). */
void dk__backend_list_remove(int i);
/* While this thread runs library i's entry point, objects it registers are that library's. */
void dk__backend_loading(int i); /* -1: not loading */

/* Note [Refused before dlopen] (dk_backend_library.c): whether a file is a well-formed ELF shared
 * object for this machine, from its ELF header and program headers, read through `read` (exactly
 * n bytes at off: true, or false with the error set). DK_OK, or DK_EINVAL with a message naming
 * `path` and what is wrong. dk__elf_check_bytes checks bytes in memory (the fuzz target). */
typedef bool (*dk__elf_read_fn)(void *ctx, uint64_t off, void *buf, size_t n);
dk_status dk__elf_check(const char *path, uint64_t size, dk__elf_read_fn read, void *ctx);
dk_status dk__elf_check_bytes(const char *path, const void *bytes, size_t size);

/* The CPU backend object (csrc/cpu/dk_cpu_backend.c), registered by dk_init. */
extern const dk_backend dk__cpu_backend;

#endif /* DK_BACKEND_PRIVATE_H */
