/* dk_backend_library.c — loading backend libraries (dk_backend_library.h). */
#include "dk_backend_library.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ------------------------------------------------------------------------------------------ */
/* Note [Refused before dlopen]                                                               */
/*
 * dlopen runs the file: its loader maps the segments a file's headers describe and trusts them,
 * and glibc's ELF loader is not hardened against malformed files (a segment that lies past the
 * end of a truncated file is mapped anyway, and touching it raises SIGBUS; a PT_DYNAMIC that lies
 * outside every segment is read from unmapped memory). Executing a backend's code is trusting it
 * by definition; what dkit guarantees is that a file which is not a well-formed ELF shared object
 * for this machine never reaches dlopen: it is refused with DK_EINVAL and a message that names
 * the path and what is wrong. The file's ELF header and program headers are read with plain reads
 * and checked:
 *   - the ELF magic number, this build's class (ELFCLASS64 on 64-bit machines), byte order and
 *     ELF version, and this build's machine (e_machine: EM_X86_64 on x86-64);
 *   - e_type ET_DYN (a shared object; not an executable, a relocatable .o or a core dump);
 *   - program headers of the native size, at least one, inside the file and aligned;
 *   - at least one PT_LOAD, each inside the file (a truncated file is refused), no larger in the
 *     file than in memory, with a power-of-two alignment that its address and offset agree on,
 *     in increasing address order and without wrapping around the address space;
 *   - a PT_DYNAMIC (a dynamically linkable object), non-empty, inside the file and inside the
 *     memory of one PT_LOAD.
 * Anything past that (the dynamic section's entries, relocations, symbols, the libraries it
 * needs) is the loader's to check: such a file claims to be a library, and running it trusts it.
 * dk__elf_check reads through a callback so that a fuzzer checks bytes in memory
 * (dk__elf_check_bytes, tests/fuzz/fuzz_backend.c) with the same code that checks files.
 */

#if defined(__x86_64__)
#define DK__EM EM_X86_64
#elif defined(__aarch64__)
#define DK__EM EM_AARCH64
#elif defined(__powerpc64__)
#define DK__EM EM_PPC64
#elif defined(__riscv)
#define DK__EM EM_RISCV
#elif defined(__s390x__)
#define DK__EM EM_S390
#elif defined(__i386__)
#define DK__EM EM_386
#elif defined(__arm__)
#define DK__EM EM_ARM
#else
#define DK__EM EM_NONE /* an architecture this file does not know: e_machine is not checked */
#endif

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define DK__ELFDATA ELFDATA2LSB
#else
#define DK__ELFDATA ELFDATA2MSB
#endif

#if __ELF_NATIVE_CLASS == 64
#define DK__ELFCLASS ELFCLASS64
#else
#define DK__ELFCLASS ELFCLASS32
#endif

static const char *dk__elf_machine_name(unsigned m)
{
    switch (m) {
    case EM_386: return "x86 (32-bit)";
    case EM_X86_64: return "x86-64";
    case EM_ARM: return "ARM (32-bit)";
    case EM_AARCH64: return "AArch64";
    case EM_PPC: return "PowerPC (32-bit)";
    case EM_PPC64: return "PowerPC64";
    case EM_RISCV: return "RISC-V";
    case EM_S390: return "S/390";
    case EM_MIPS: return "MIPS";
    case EM_SPARCV9: return "SPARC V9";
    case EM_NONE: return "no machine";
    default: return "an unknown machine";
    }
}

static dk_status dk__elf_bad(const char *path, const char *fmt, ...) DK_PRINTF(2, 3);
static dk_status dk__elf_bad(const char *path, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return dk_error(DK_EINVAL, "cannot load backend '%s': %s", path, why);
}

dk_status dk__elf_check(const char *path, uint64_t size, dk__elf_read_fn read, void *ctx)
{
    const unsigned long long n = size;
    if (size == 0) return dk__elf_bad(path, "the file is empty, not an ELF shared object");
    ElfW(Ehdr) eh;
    const size_t head = size < sizeof eh ? (size_t)size : sizeof eh;
    memset(&eh, 0, sizeof eh);
    if (!read(ctx, 0, &eh, head)) return dk_last_status();
    if (head < SELFMAG || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
        return dk__elf_bad(path, "not an ELF file (it does not start with the ELF magic number \\177ELF)");
    if (head < EI_NIDENT)
        return dk__elf_bad(path, "a truncated ELF file (%llu bytes, shorter than an ELF header of %zu)", n, sizeof eh);
    if (eh.e_ident[EI_CLASS] != DK__ELFCLASS)
        return dk__elf_bad(path, "an ELF file of class %s; this dkit is %s",
                           eh.e_ident[EI_CLASS] == ELFCLASS32   ? "ELFCLASS32 (32-bit)"
                           : eh.e_ident[EI_CLASS] == ELFCLASS64 ? "ELFCLASS64 (64-bit)"
                                                                : "unknown",
                           DK__ELFCLASS == ELFCLASS64 ? "64-bit" : "32-bit");
    if (eh.e_ident[EI_DATA] != DK__ELFDATA)
        return dk__elf_bad(path, "an ELF file of %s byte order; this machine is %s",
                           eh.e_ident[EI_DATA] == ELFDATA2LSB   ? "little-endian"
                           : eh.e_ident[EI_DATA] == ELFDATA2MSB ? "big-endian"
                                                                : "unknown",
                           DK__ELFDATA == ELFDATA2LSB ? "little-endian" : "big-endian");
    if (head < sizeof eh)
        return dk__elf_bad(path, "a truncated ELF file (%llu bytes, shorter than an ELF header of %zu)", n, sizeof eh);
    if (eh.e_ident[EI_VERSION] != EV_CURRENT || eh.e_version != EV_CURRENT)
        return dk__elf_bad(path, "a malformed ELF file (ELF version %u/%u, expected %u)",
                           (unsigned)eh.e_ident[EI_VERSION], (unsigned)eh.e_version, (unsigned)EV_CURRENT);
    if (DK__EM != EM_NONE && eh.e_machine != DK__EM)
        return dk__elf_bad(path, "an ELF file for another machine (%s, e_machine %u); this one is %s (e_machine %u)",
                           dk__elf_machine_name(eh.e_machine), (unsigned)eh.e_machine, dk__elf_machine_name(DK__EM),
                           (unsigned)DK__EM);
    switch (eh.e_type) {
    case ET_DYN: break;
    case ET_EXEC: return dk__elf_bad(path, "an ELF executable (ET_EXEC), not a shared object (ET_DYN)");
    case ET_REL:
        return dk__elf_bad(path, "an ELF relocatable object (ET_REL, a .o file), not a shared object (ET_DYN)");
    case ET_CORE: return dk__elf_bad(path, "an ELF core dump (ET_CORE), not a shared object (ET_DYN)");
    default: return dk__elf_bad(path, "an ELF file of type %u, not a shared object (ET_DYN)", (unsigned)eh.e_type);
    }
    /* Program headers: the native size, at least one, inside the file, aligned. */
    if (eh.e_phentsize != sizeof(ElfW(Phdr)))
        return dk__elf_bad(path, "a malformed ELF file (program header entries of %u bytes, expected %zu)",
                           (unsigned)eh.e_phentsize, sizeof(ElfW(Phdr)));
    if (eh.e_phnum == 0) return dk__elf_bad(path, "a malformed ELF file (no program headers)");
    if (eh.e_phnum == PN_XNUM)
        return dk__elf_bad(path, "a malformed ELF file (extended program header numbering, PN_XNUM)");
    const uint64_t phoff = eh.e_phoff, phbytes = (uint64_t)eh.e_phnum * sizeof(ElfW(Phdr));
    if (phoff > size || phbytes > size - phoff)
        return dk__elf_bad(path,
                           "a truncated or malformed ELF file (%u program headers at byte %llu, past the end of the "
                           "file's %llu bytes)",
                           (unsigned)eh.e_phnum, (unsigned long long)phoff, n);
    if (phoff % _Alignof(ElfW(Phdr)) != 0)
        return dk__elf_bad(path, "a malformed ELF file (misaligned program headers at byte %llu)",
                           (unsigned long long)phoff);
    int nload = 0, dyn = -1;
    uint64_t last_end = 0; /* end of the previous PT_LOAD's memory */
    ElfW(Phdr) dph;
    memset(&dph, 0, sizeof dph);
    for (int i = 0; i < eh.e_phnum; i++) {
        ElfW(Phdr) ph;
        if (!read(ctx, phoff + (uint64_t)i * sizeof ph, &ph, sizeof ph)) return dk_last_status();
        if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC) continue;
        const char *kind = ph.p_type == PT_LOAD ? "PT_LOAD" : "PT_DYNAMIC";
        const uint64_t off = ph.p_offset, fsz = ph.p_filesz, va = ph.p_vaddr, msz = ph.p_memsz;
        if (off > size || fsz > size - off)
            return dk__elf_bad(path,
                               "a truncated ELF file (program header %d, %s, needs bytes up to %llu; the file has "
                               "%llu)",
                               i, kind, off > size ? (unsigned long long)off : (unsigned long long)(off + fsz), n);
        if (fsz > msz || va + msz < va)
            return dk__elf_bad(path, "a malformed ELF file (program header %d, %s, has %s)", i, kind,
                               fsz > msz ? "more bytes in the file than in memory" : "memory past the address space");
        if (ph.p_type == PT_DYNAMIC) {
            if (dyn >= 0) return dk__elf_bad(path, "a malformed ELF file (two PT_DYNAMIC program headers)");
            dyn = i;
            dph = ph;
            continue;
        }
        const uint64_t al = ph.p_align;
        if (al > 1 && ((al & (al - 1)) != 0 || (va - off) % al != 0))
            return dk__elf_bad(path, "a malformed ELF file (program header %d, PT_LOAD, has alignment %llu, which %s)",
                               i, (unsigned long long)al,
                               (al & (al - 1)) != 0 ? "is not a power of two" : "its address and offset disagree on");
        if (nload > 0 && va < last_end)
            return dk__elf_bad(
                path, "a malformed ELF file (program header %d, PT_LOAD, overlaps or precedes the one before)", i);
        last_end = va + msz;
        nload++;
    }
    if (nload == 0) return dk__elf_bad(path, "a malformed ELF file (no PT_LOAD program header: nothing to load)");
    if (dyn < 0)
        return dk__elf_bad(path,
                           "an ELF file without a PT_DYNAMIC program header (not a dynamically linked shared object)");
    if (dph.p_memsz == 0) return dk__elf_bad(path, "a malformed ELF file (an empty PT_DYNAMIC)");
    /* The loader reads the dynamic section where it is mapped: inside one PT_LOAD's memory. */
    for (int i = 0; i < eh.e_phnum; i++) {
        ElfW(Phdr) ph;
        if (!read(ctx, phoff + (uint64_t)i * sizeof ph, &ph, sizeof ph)) return dk_last_status();
        if (ph.p_type == PT_LOAD && dph.p_vaddr >= ph.p_vaddr && dph.p_vaddr + dph.p_memsz <= ph.p_vaddr + ph.p_memsz)
            return DK_OK;
    }
    return dk__elf_bad(path, "a malformed ELF file (its PT_DYNAMIC lies outside every PT_LOAD)");
}

typedef struct {
    const unsigned char *p;
    size_t n;
} dk__elf_mem;

static bool dk__elf_read_mem(void *ctx, uint64_t off, void *buf, size_t n)
{
    const dk__elf_mem *m = (const dk__elf_mem *)ctx;
    if (off > m->n || n > m->n - off) return dk_error(DK_EINVAL, "ELF check: read past the end"), false;
    memcpy(buf, m->p + off, n);
    return true;
}

dk_status dk__elf_check_bytes(const char *path, const void *bytes, size_t size)
{
    dk__elf_mem m = {(const unsigned char *)bytes, size};
    return dk__elf_check(path, size, dk__elf_read_mem, &m);
}

typedef struct {
    int fd;
    const char *path;
} dk__elf_file;

static bool dk__elf_read_file(void *ctx, uint64_t off, void *buf, size_t n)
{
    const dk__elf_file *f = (const dk__elf_file *)ctx;
    for (size_t got = 0; got < n;) {
        const ssize_t r = pread(f->fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            dk_error(DK_ENOENT, "cannot load backend '%s': cannot read it (%s)", f->path,
                     r < 0 ? strerror(errno) : "it shrank while being read");
            return false;
        }
        got += (size_t)r;
    }
    return true;
}

/* The file at `path`, checked (Note [Refused before dlopen]). */
static dk_status dk__elf_check_file(const char *path)
{
    /* O_NONBLOCK: a FIFO must not block the open; it is refused below as not a regular file. */
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return dk_error(DK_ENOENT, "cannot load backend '%s': cannot open it (%s)", path, strerror(errno));
    struct stat sb;
    dk_status st;
    if (fstat(fd, &sb) != 0) {
        st = dk_error(DK_ENOENT, "cannot load backend '%s': cannot stat it (%s)", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        st = dk__elf_bad(path, "not a regular file (%s)",
                         S_ISDIR(sb.st_mode)                          ? "a directory"
                         : S_ISFIFO(sb.st_mode)                       ? "a FIFO"
                         : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device"
                                                                      : "a socket or other special file");
    } else {
        dk__elf_file f = {fd, path};
        st = dk__elf_check(path, (uint64_t)sb.st_size, dk__elf_read_file, &f);
    }
    close(fd);
    return st;
}

/* Note [A failed load leaves nothing behind]: undo, newest first. */
static void dk__undo(dk__journal *j, dk_keyset claimed, int entry)
{
    for (int i = j->n - 1; i >= 0; i--) (void)dk_unregister(j->handles[i]); /* stale handles are refused */
    dk__backend_list_remove(entry);
    for (dk_key k = 0; k < DK_NUM_KEYS; k++)
        if (dk_keyset_has(claimed, k)) dk__key_release(k);
}

/* What each loaded library's entry made (Note [Unloading a backend]): the handles of its
 * registrations and the keys it claimed, by path. Written under dk__load_mutex. */
#define DK__MAX_LOADED 32
static struct {
    char *path; /* NULL: a free slot */
    dk__journal journal;
    dk_keyset claimed;
} dk__loaded[DK__MAX_LOADED];

static void dk__loaded_keep(const char *path, dk__journal *j, dk_keyset claimed)
{
    for (int i = 0; i < DK__MAX_LOADED; i++) {
        if (dk__loaded[i].path) continue;
        if (!(dk__loaded[i].path = strdup(path))) break;
        dk__loaded[i].journal = *j;
        dk__loaded[i].claimed = claimed;
        j->handles = NULL; /* kept: the caller frees nothing */
        return;
    }
    /* No room to remember it: the library works, but dk_unload_backend will refuse it. */
}

static dk_status dk__run_entry(dk_status (*init)(void), const char *name, const char *path, const struct stat *file)
{
    int entry = dk__backend_list_add_library(name, path, (uint64_t)file->st_dev, (uint64_t)file->st_ino);
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
    if (st == DK_OK) {
        dk__backend_list_note_keys(entry, claimed);
        dk__loaded_keep(path, &journal, claimed);
    }
    if (st != DK_OK) {
        char why[512];
        if (dk_last_error()[0]) snprintf(why, sizeof why, "%s", dk_last_error());
        else snprintf(why, sizeof why, "its entry point returned %s without a message", dk_status_name(st));
        dk__undo(&journal, claimed, entry);
        st = dk_error(st, "backend '%s' (%s) failed to initialise: %s%s", name, path, why,
                      journal.overflow ? " [out of memory recording its registrations: some may remain]" : "");
    }
    free(journal.handles);
    return st;
}

/*
 * Note [A library loads once]
 * One library file can be reached by several paths: a symlink (libfoo.so -> libfoo.so.1), a hard
 * link, a relative and an absolute path, DKIT_BACKENDS and a package's entry point. dlopen maps
 * it once whatever the path (the dynamic loader matches files by device and inode) and returns
 * the same handle, but a second run of its entry point would register everything again: its
 * kernels and fallback pushed a second time onto their stacks (and reported as overriding
 * themselves), its object refused. So a load is a no-op when a library from the same path or the
 * same file (stat's st_dev and st_ino, symlinks followed) is already loaded. A file replaced on
 * disk is a new file: loading it runs the new library's entry point, as dlopen maps it anew.
 */
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
    if (dk__backend_list_has_file(path, (uint64_t)sb.st_dev, (uint64_t)sb.st_ino)) goto done;
    if ((st = dk__elf_check_file(path)) != DK_OK) goto done; /* Note [Refused before dlopen] */
    /* RTLD_LOCAL: backends see libdkit (their DT_NEEDED) but not each other's symbols. A path
     * without a slash is opened as ./path: the file just checked, not one of that name on the
     * library search path. */
    char local[4096];
    const char *open_path = path;
    if (!strchr(path, '/')) {
        if ((size_t)snprintf(local, sizeof local, "./%s", path) >= sizeof local) {
            st = dk_error(DK_EINVAL, "cannot load backend '%s': path too long", path);
            goto done;
        }
        open_path = local;
    }
    void *h = dlopen(open_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        st = dk_error(DK_ENOENT, "cannot load backend '%s': %s", path, dlerror());
        goto done;
    }
    const uint32_t *abi = (const uint32_t *)dlsym(h, "dk_backend_abi_version");
    dk_status (*init)(void) = NULL;
    *(void **)&init = dlsym(h, "dk_backend_init");
    const char *name = (const char *)dlsym(h, "dk_backend_name");
    if (!abi || !init || !name) {
        st = dk_error(
            DK_EINVAL,
            "cannot load backend '%s': not a dkit backend (missing entry point %s; define it with DK_BACKEND_ENTRY)",
            path,
            !abi    ? "dk_backend_abi_version"
            : !init ? "dk_backend_init"
                    : "dk_backend_name");
        goto done;
    }
    if (*abi != DK_ABI_VERSION) {
        st = dk_error(DK_EABI, "cannot load backend '%s': built for dkit ABI %u, this dkit has ABI %u", path, *abi,
                      DK_ABI_VERSION);
        goto done;
    }
    st = dk__run_entry(init, name, path, &sb);
done:
    pthread_mutex_unlock(&dk__load_mutex);
    return st;
}

/*
 * Note [Unloading a backend]
 * dk_unload_backend(name) undoes what the library's entry point did, as a failed load is undone
 * (Note [A failed load leaves nothing behind]): every registration the entry made (kernels,
 * fallbacks, its CPU fallback, composites), newest first, then its backend object and its entry
 * in the backend list, then the keys it claimed (the device type no longer maps to them, and a
 * released key's table row disappears). Every op's dispatch table is then what it was before
 * the load. What is not undone, and why:
 *   - the library stays mapped (no dlclose): a kernel of it may be running on another thread,
 *     a tensor's deleter or a function pointer handed out earlier may still point into it, and
 *     its backend object (static storage) is what frees memory allocated through it. Loading it
 *     again runs its entry point again on the same mapping, which is why the entry must not
 *     assume its static state is fresh;
 *   - registrations the library made outside its entry point (later, from its own calls) were
 *     not recorded, and stay;
 *   - a call already past the dispatcher finishes on the kernel it selected; the next call
 *     dispatches without it.
 * Built-in backends (no library) are refused with DK_EINVAL, unknown names with DK_ENOENT.
 */
static int dk__list_index_of_path(const char *path)
{
    for (int i = 0; i < dk_backend_count(); i++) {
        const dk_backend_info b = dk_backend_at(i);
        if (b.path && strcmp(b.path, path) == 0) return i;
    }
    return -1;
}

dk_status dk_unload_backend(const char *name)
{
    if (!name || !name[0]) return dk_error(DK_EINVAL, "dk_unload_backend: empty name");
    if (dk__tls_in_entry) return dk_error(DK_EINVAL, "cannot unload backend '%s' from inside an entry point", name);
    pthread_once(&dk__load_atfork_once, dk__load_atfork);
    pthread_mutex_lock(&dk__load_mutex);
    dk_status st = dk_error(DK_ENOENT, "dk_unload_backend: no backend named '%s' is loaded", name);
    for (int i = 0; i < dk_backend_count(); i++) {
        const dk_backend_info b = dk_backend_at(i);
        if (strcmp(b.name, name) != 0) continue;
        if (!b.path) {
            st = dk_error(DK_EINVAL, "dk_unload_backend: backend '%s' is built into libdkit and cannot be unloaded",
                          name);
            break;
        }
        int rec = -1;
        for (int r = 0; r < DK__MAX_LOADED && rec < 0; r++)
            if (dk__loaded[r].path && strcmp(dk__loaded[r].path, b.path) == 0) rec = r;
        if (rec < 0 || dk__loaded[rec].journal.overflow) {
            st = dk_error(DK_ENOTIMPL,
                          "dk_unload_backend: what backend '%s' registered was not recorded (out of memory when it "
                          "loaded), so it cannot be undone",
                          name);
            break;
        }
        dk__undo(&dk__loaded[rec].journal, dk__loaded[rec].claimed, dk__list_index_of_path(b.path));
        free(dk__loaded[rec].journal.handles);
        free(dk__loaded[rec].path);
        memset(&dk__loaded[rec], 0, sizeof dk__loaded[rec]);
        dk_clear_error();
        st = DK_OK;
        break;
    }
    pthread_mutex_unlock(&dk__load_mutex);
    return st;
}
