/*
 * fuzz_backend.c — the ELF check of dk_load_backend (Note [Refused before dlopen] in
 * dk_backend_library.c) on the input's bytes, taken as a backend library's file.
 *
 * Each input is checked twice: in memory (dk__elf_check_bytes), and as a file through
 * dk_load_backend, which reads it with the same check and then, if it passes, dlopens it. This
 * target links with --wrap=dlopen and --wrap=dlerror (tests/fuzz/rules.mk), so dlopen never runs
 * here: reaching it with bytes the check refused breaks the Note's guarantee and aborts; reaching
 * it with accepted bytes returns NULL, which the loader reports as a load error.
 *
 * Contracts (a broken one aborts with "contract broken: ..."):
 *  - the check in memory answers DK_OK or DK_EINVAL, and a refusal names the file and says why;
 *  - dk_load_backend refuses exactly what the check in memory refused, with the same message,
 *    and never dlopens it; it dlopens exactly the accepted bytes (and then fails, as dlopen here
 *    does);
 *  - special files (a directory, a character device) are refused before dlopen as well.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include "fuzz_common.h"

#include "dk_backend_private.h"

/* ------------------------------------------------------------------------------------------ */
/* dlopen, as this target sees it                                                             */

static bool fz_dlopen_allowed; /* the bytes passed the check: the loader may go on to dlopen */
static int fz_dlopen_calls;

void *__wrap_dlopen(const char *file, int mode);
void *__wrap_dlopen(const char *file, int mode)
{
    (void)mode;
    FZ_ASSERT(fz_dlopen_allowed, "dlopen reached with a file the ELF check refused (%s)", file ? file : "NULL");
    fz_dlopen_calls++;
    return NULL; /* never run fuzzed bytes: running a library trusts it (the Note) */
}

char *__wrap_dlerror(void);
char *__wrap_dlerror(void)
{
    static char msg[] = "fuzz_backend: dlopen is not run here";
    return msg;
}

/* ------------------------------------------------------------------------------------------ */

static char fz_path[64];

static void fz_remove_file(void) { unlink(fz_path); }

static void fz_setup(void)
{
    if (fz_path[0]) return;
    const char *dir = getenv("TMPDIR");
    snprintf(fz_path, sizeof fz_path, "%s/dk_fuzz_backend_XXXXXX", dir && strlen(dir) < 32 ? dir : "/tmp");
    const int fd = mkstemp(fz_path);
    if (fd < 0) {
        perror("fuzz_backend: mkstemp");
        abort();
    }
    close(fd);
    atexit(fz_remove_file);
    /* Special files, once: refused as not regular files, before dlopen. */
    static const char *const special[] = {"/", "/dev/null"};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
        dk_clear_error();
        const dk_status st = dk_load_backend(special[i]);
        FZ_ASSERT(st == DK_EINVAL && strstr(dk_last_error(), "not a regular file"), "dk_load_backend('%s') answered %s",
                  special[i], dk_status_name(st));
    }
}

/* The temporary file holds exactly these bytes. */
static void fz_write_file(const uint8_t *data, size_t size)
{
    const int fd = open(fz_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) {
        perror("fuzz_backend: open");
        abort();
    }
    for (size_t done = 0; done < size;) {
        const ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            perror("fuzz_backend: write");
            abort();
        }
        done += (size_t)w;
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_setup();

    dk_clear_error();
    const dk_status mem = dk__elf_check_bytes(fz_path, data, size);
    FZ_ASSERT(mem == DK_OK || mem == DK_EINVAL, "the ELF check answered %s", dk_status_name(mem));
    char why[1024] = "";
    if (mem != DK_OK) {
        FZ_ASSERT(strstr(dk_last_error(), fz_path) != NULL, "the ELF check's refusal does not name the file");
        snprintf(why, sizeof why, "%s", dk_last_error());
    }

    fz_write_file(data, size);
    fz_dlopen_allowed = mem == DK_OK;
    const int calls = fz_dlopen_calls;
    dk_clear_error();
    const dk_status st = dk_load_backend(fz_path);
    fz_dlopen_allowed = false;
    static int trace = -1; /* FZ_TRACE=1: one line per input, to see what a corpus reaches */
    if (trace < 0) trace = getenv("FZ_TRACE") != NULL;
    if (trace) fprintf(stderr, "fuzz_backend: %s: %s\n", dk_status_name(mem), mem ? why : dk_last_error());
    FZ_ASSERT(st != DK_OK, "dk_load_backend succeeded without dlopen");
    FZ_ASSERT(dk_last_error()[0] != '\0', "dk_load_backend failed (%s) without a message", dk_status_name(st));
    if (mem == DK_OK) {
        FZ_ASSERT(fz_dlopen_calls == calls + 1, "accepted bytes did not reach dlopen from a file (%s: %s)",
                  dk_status_name(st), dk_last_error());
    } else {
        FZ_ASSERT(st == DK_EINVAL && strcmp(dk_last_error(), why) == 0,
                  "the file and the bytes were judged differently:\n  bytes: %s\n  file:  %s (%s)", why,
                  dk_last_error(), dk_status_name(st));
    }
    return 0;
}
