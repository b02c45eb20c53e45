/*
 * dk_init.c — the core's one explicit initialisation, and the announcement of ops.
 *
 * Note [Core init]
 * dk_init() registers what the core itself provides: the CPU backend object and the Profile
 * fallback, and reads DKIT_DISPATCH_TRACE. It runs once (pthread_once), when the library loads
 * (a constructor) and before any op joins the op list (dk__op_announce, which every
 * DK_DEFINE_OP calls from its own constructor). The second path keeps a plain static link of
 * libdkit.a complete: a linker keeps only the archive members something references, and any
 * program that defines or uses an op references this file through its announcement.
 *
 * This file sits above the rest of the core (it calls the dispatcher, Profile and the backend
 * list, and nothing calls it back), so the core's call graph has no circle.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dk_backend_private.h"
#include "dk_init.h"
#include "dk_op_define.h"
#include "dk_op_private.h"

void dk__profile_install(void); /* dk_profile.c */

static pthread_once_t dk__init_once = PTHREAD_ONCE_INIT;

static void dk__init_run(void)
{
    if (dk_backend_register(&dk__cpu_backend, NULL)) dk_warn("%s", dk_last_error());
    dk__profile_install();
    const char *v = getenv("DKIT_DISPATCH_TRACE");
    if (v && v[0] && strcmp(v, "0") != 0) dk_dispatch_set_trace(true);
}

void dk_init(void) { pthread_once(&dk__init_once, dk__init_run); }

void dk__op_announce(dk_op *op)
{
    dk_init();
    dk__op_add(op);
}

DK__CONSTRUCTOR(dk__init_at_load) { dk_init(); }
