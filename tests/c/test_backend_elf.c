/*
 * test_backend_elf.c — files that are not well-formed ELF shared objects for this machine are
 * refused by dk_load_backend before dlopen, with a message naming the path and what is wrong
 * (Note [Refused before dlopen] in csrc/common/dk_backend_library.c).
 *
 * The malformed files are a real backend (the backend_noinit fixture, built by tests/c/rules.mk
 * into $DK_TEST_BUILD/fixtures) with a few bytes patched, or cut short, written to a temporary
 * directory. Each refusal must leave the backend list unchanged. The fuzz target
 * tests/fuzz/fuzz_backend.c checks the same function on arbitrary bytes.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "dk_test.h"

static char fixture_path[1024];
static char tmpdir[256];
static unsigned char *good; /* the fixture's bytes */
static size_t good_size;

static unsigned char *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return b;
}

/* tmpdir/name holding bytes[0 .. n); returns the path in buf. */
static const char *write_tmp(const char *name, const void *bytes, size_t n, char *buf, size_t bn)
{
    snprintf(buf, bn, "%s/%s", tmpdir, name);
    FILE *f = fopen(buf, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    return buf;
}

static int group_setup(void **state)
{
    dkt_group_capture_warnings(state);
    const char *build = getenv("DK_TEST_BUILD");
    if (!build || !build[0]) {
        fprintf(stderr, "test_backend_elf: DK_TEST_BUILD is not set; run it through `make test-c`\n");
        return -1;
    }
    snprintf(fixture_path, sizeof fixture_path, "%s/fixtures/libbackend_noinit.so", build);
    good = read_all(fixture_path, &good_size);
    if (!good) {
        fprintf(stderr, "test_backend_elf: cannot read %s; it is built by tests/c/rules.mk\n", fixture_path);
        return -1;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dk_backend_elf_XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    return 0;
}

static int group_teardown(void **state)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "test_backend_elf: could not remove %s\n", tmpdir);
    free(good);
    return dkt_group_release_warnings(state);
}

/* Loading `path` fails with `status` and exactly `message`, and registers nothing. */
static void assert_refused(const char *path, dk_status status, const char *message)
{
    const int before = dk_backend_count();
    assert_error(dk_load_backend(path), status, message);
    assert_int_equal(dk_backend_count(), before);
}

/* A copy of the fixture, patched by `patch`, written to tmpdir/name. */
static const char *patched(const char *name, void (*patch)(unsigned char *b, size_t n), char *buf, size_t bn)
{
    unsigned char *b = malloc(good_size);
    assert_non_null(b);
    memcpy(b, good, good_size);
    patch(b, good_size);
    write_tmp(name, b, good_size, buf, bn);
    free(b);
    return buf;
}

static ElfW(Ehdr) *ehdr(unsigned char *b) { return (ElfW(Ehdr) *)(void *)b; }

/* The first program header of type `type`, or NULL. */
static ElfW(Phdr) *phdr_of(unsigned char *b, uint32_t type, int *index)
{
    ElfW(Ehdr) *eh = ehdr(b);
    for (int i = 0; i < eh->e_phnum; i++) {
        ElfW(Phdr) *ph = (ElfW(Phdr) *)(void *)(b + eh->e_phoff + (size_t)i * sizeof *ph);
        if (ph->p_type == type) {
            if (index) *index = i;
            return ph;
        }
    }
    return NULL;
}

static void the_fixture_itself_passes_the_check(void **state)
{
    (void)state;
    /* It reaches dlopen and fails only for what it is: a library without dk_backend_init. */
    char want[1400];
    snprintf(want, sizeof want,
             "cannot load backend '%s': not a dkit backend (missing entry point dk_backend_init; define it with "
             "DK_BACKEND_ENTRY)",
             fixture_path);
    assert_refused(fixture_path, DK_EINVAL, want);
}

static void a_text_file_is_not_an_elf_file(void **state)
{
    (void)state;
    char path[512], want[1024];
    const char text[] = "this is not a library\n";
    write_tmp("libtext.so", text, sizeof text - 1, path, sizeof path);
    snprintf(want, sizeof want,
             "cannot load backend '%s': not an ELF file (it does not start with the ELF magic number \\177ELF)", path);
    assert_refused(path, DK_EINVAL, want);
}

static void an_empty_file_is_refused(void **state)
{
    (void)state;
    char path[512], want[1024];
    write_tmp("libempty.so", "", 0, path, sizeof path);
    snprintf(want, sizeof want, "cannot load backend '%s': the file is empty, not an ELF shared object", path);
    assert_refused(path, DK_EINVAL, want);
}

static void a_truncated_elf_header_is_refused(void **state)
{
    (void)state;
    char path[512], want[1024];
    write_tmp("libcut40.so", good, 40, path, sizeof path);
    snprintf(want, sizeof want,
             "cannot load backend '%s': a truncated ELF file (40 bytes, shorter than an ELF header of %zu)", path,
             sizeof(ElfW(Ehdr)));
    assert_refused(path, DK_EINVAL, want);
    /* The magic number alone: still an ELF file, still too short. */
    write_tmp("libcut4.so", good, 4, path, sizeof path);
    snprintf(want, sizeof want,
             "cannot load backend '%s': a truncated ELF file (4 bytes, shorter than an ELF header of %zu)", path,
             sizeof(ElfW(Ehdr)));
    assert_refused(path, DK_EINVAL, want);
}

static void a_truncated_library_is_refused_before_its_segments_are_mapped(void **state)
{
    (void)state;
    /* Headers intact, segments cut off: dlopen would map pages past the end of the file (SIGBUS
     * when touched). The last PT_LOAD's file range ends past the cut. */
    unsigned char *b = malloc(good_size);
    assert_non_null(b);
    memcpy(b, good, good_size);
    ElfW(Ehdr) *eh = ehdr(b);
    uint64_t end = 0;
    int last = -1;
    for (int i = 0; i < eh->e_phnum; i++) {
        ElfW(Phdr) *ph = (ElfW(Phdr) *)(void *)(b + eh->e_phoff + (size_t)i * sizeof *ph);
        if (ph->p_type == PT_LOAD && ph->p_filesz > 0) {
            end = ph->p_offset + ph->p_filesz;
            last = i;
        }
    }
    assert_true(last >= 0 && end > 64);
    const size_t cut = (size_t)end - 1;
    /* Program headers come before the cut in every real library. */
    assert_true(eh->e_phoff + (uint64_t)eh->e_phnum * sizeof(ElfW(Phdr)) <= cut);
    char path[512], want[1024];
    write_tmp("libcut.so", b, cut, path, sizeof path);
    free(b);
    dk_clear_error();
    const int before = dk_backend_count();
    assert_int_equal(dk_load_backend(path), DK_EINVAL);
    assert_int_equal(dk_backend_count(), before);
    snprintf(want, sizeof want, "cannot load backend '%s': a truncated ELF file (program header ", path);
    assert_memory_equal(dk_last_error(), want, strlen(want));
    snprintf(want, sizeof want, "; the file has %zu)", cut);
    const char *e = dk_last_error();
    assert_true(strlen(e) > strlen(want));
    assert_string_equal(e + strlen(e) - strlen(want), want);
}

static void patch_machine(unsigned char *b, size_t n)
{
    (void)n;
    ehdr(b)->e_machine = ehdr(b)->e_machine == EM_AARCH64 ? EM_X86_64 : EM_AARCH64;
}

static void an_elf_file_for_another_machine_is_refused(void **state)
{
    (void)state;
    char path[512], want[1024];
    patched("libaarch64.so", patch_machine, path, sizeof path);
#if defined(__x86_64__)
    snprintf(want, sizeof want,
             "cannot load backend '%s': an ELF file for another machine (AArch64, e_machine 183); this one is x86-64 "
             "(e_machine 62)",
             path);
    assert_refused(path, DK_EINVAL, want);
#else
    dk_clear_error();
    assert_int_equal(dk_load_backend(path), DK_EINVAL);
    assert_non_null(strstr(dk_last_error(), "an ELF file for another machine"));
#endif
}

static void patch_exec(unsigned char *b, size_t n)
{
    (void)n;
    ehdr(b)->e_type = ET_EXEC;
}

static void patch_rel(unsigned char *b, size_t n)
{
    (void)n;
    ehdr(b)->e_type = ET_REL;
}

static void an_executable_or_object_file_is_not_a_shared_object(void **state)
{
    (void)state;
    char path[512], want[1024];
    patched("libexec.so", patch_exec, path, sizeof path);
    snprintf(want, sizeof want, "cannot load backend '%s': an ELF executable (ET_EXEC), not a shared object (ET_DYN)",
             path);
    assert_refused(path, DK_EINVAL, want);
    patched("librel.so", patch_rel, path, sizeof path);
    snprintf(want, sizeof want,
             "cannot load backend '%s': an ELF relocatable object (ET_REL, a .o file), not a shared object (ET_DYN)",
             path);
    assert_refused(path, DK_EINVAL, want);
}

static void patch_class32(unsigned char *b, size_t n)
{
    (void)n;
    b[EI_CLASS] = ELFCLASS32;
}

static void patch_big_endian(unsigned char *b, size_t n)
{
    (void)n;
    b[EI_DATA] = ELFDATA2MSB;
}

static void a_32_bit_or_big_endian_file_is_refused(void **state)
{
    (void)state;
#if defined(__x86_64__)
    char path[512], want[1024];
    patched("lib32.so", patch_class32, path, sizeof path);
    snprintf(want, sizeof want,
             "cannot load backend '%s': an ELF file of class ELFCLASS32 (32-bit); this dkit is 64-bit", path);
    assert_refused(path, DK_EINVAL, want);
    patched("libbe.so", patch_big_endian, path, sizeof path);
    snprintf(want, sizeof want,
             "cannot load backend '%s': an ELF file of big-endian byte order; this machine is little-endian", path);
    assert_refused(path, DK_EINVAL, want);
#else
    skip();
#endif
}

static void patch_no_dynamic(unsigned char *b, size_t n)
{
    (void)n;
    ElfW(Phdr) *ph = phdr_of(b, PT_DYNAMIC, NULL);
    assert_non_null(ph);
    ph->p_type = PT_NULL;
}

static void patch_no_load(unsigned char *b, size_t n)
{
    (void)n;
    ElfW(Phdr) *ph;
    while ((ph = phdr_of(b, PT_LOAD, NULL)) != NULL) ph->p_type = PT_NULL;
}

static void patch_dynamic_elsewhere(unsigned char *b, size_t n)
{
    (void)n;
    ElfW(Phdr) *ph = phdr_of(b, PT_DYNAMIC, NULL);
    assert_non_null(ph);
    ph->p_vaddr += (ElfW(Addr))1 << 40; /* outside every segment: the loader would read unmapped memory */
}

static void patch_phoff(unsigned char *b, size_t n) { ehdr(b)->e_phoff = n; /* program headers past the end */ }

static void patch_phentsize(unsigned char *b, size_t n)
{
    (void)n;
    ehdr(b)->e_phentsize = 32;
}

static void malformed_program_headers_are_refused(void **state)
{
    (void)state;
    char path[512], want[1024];
    patched("libnodyn.so", patch_no_dynamic, path, sizeof path);
    snprintf(want, sizeof want,
             "cannot load backend '%s': an ELF file without a PT_DYNAMIC program header (not a dynamically linked "
             "shared object)",
             path);
    assert_refused(path, DK_EINVAL, want);
    patched("libnoload.so", patch_no_load, path, sizeof path);
    snprintf(want, sizeof want,
             "cannot load backend '%s': a malformed ELF file (no PT_LOAD program header: nothing to load)", path);
    assert_refused(path, DK_EINVAL, want);
    patched("libdynout.so", patch_dynamic_elsewhere, path, sizeof path);
    snprintf(want, sizeof want,
             "cannot load backend '%s': a malformed ELF file (its PT_DYNAMIC lies outside every PT_LOAD)", path);
    assert_refused(path, DK_EINVAL, want);
    patched("libphoff.so", patch_phoff, path, sizeof path);
    snprintf(
        want, sizeof want,
        "cannot load backend '%s': a truncated or malformed ELF file (%u program headers at byte %zu, past the end "
        "of the file's %zu bytes)",
        path, (unsigned)ehdr(good)->e_phnum, good_size, good_size);
    assert_refused(path, DK_EINVAL, want);
    patched("libphent.so", patch_phentsize, path, sizeof path);
    snprintf(want, sizeof want,
             "cannot load backend '%s': a malformed ELF file (program header entries of 32 bytes, expected %zu)", path,
             sizeof(ElfW(Phdr)));
    assert_refused(path, DK_EINVAL, want);
}

static void a_directory_or_fifo_is_not_a_regular_file(void **state)
{
    (void)state;
    char want[1024];
    snprintf(want, sizeof want, "cannot load backend '%s': not a regular file (a directory)", tmpdir);
    assert_refused(tmpdir, DK_EINVAL, want);
    /* A FIFO nobody writes to: refused without blocking in open() or read(). */
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s/libfifo.so", tmpdir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(want, sizeof want, "cannot load backend '%s': not a regular file (a FIFO)", fifo);
    assert_refused(fifo, DK_EINVAL, want);
}

static void a_path_without_a_slash_is_the_file_in_the_current_directory(void **state)
{
    (void)state;
    /* dlopen("name") would search the library path instead of loading the file just checked. */
    char path[512], cwd[1024], want[512];
    write_tmp("libdk_elftest_noinit.so", good, good_size, path, sizeof path);
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tmpdir), 0);
    snprintf(want, sizeof want,
             "cannot load backend 'libdk_elftest_noinit.so': not a dkit backend (missing entry point "
             "dk_backend_init; define it with DK_BACKEND_ENTRY)");
    dk_clear_error();
    const dk_status st = dk_load_backend("libdk_elftest_noinit.so");
    const int back = chdir(cwd);
    assert_int_equal(back, 0);
    assert_string_equal(dk_status_name(st), "DK_EINVAL");
    assert_string_equal(dk_last_error(), want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(the_fixture_itself_passes_the_check),
        dkt_test(a_text_file_is_not_an_elf_file),
        dkt_test(an_empty_file_is_refused),
        dkt_test(a_truncated_elf_header_is_refused),
        dkt_test(a_truncated_library_is_refused_before_its_segments_are_mapped),
        dkt_test(an_elf_file_for_another_machine_is_refused),
        dkt_test(an_executable_or_object_file_is_not_a_shared_object),
        dkt_test(a_32_bit_or_big_endian_file_is_refused),
        dkt_test(malformed_program_headers_are_refused),
        dkt_test(a_directory_or_fifo_is_not_a_regular_file),
        dkt_test(a_path_without_a_slash_is_the_file_in_the_current_directory),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
