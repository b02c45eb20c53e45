/* dk_lock.c — the registry lock (Note [The registry lock] in dk_lock_private.h). */
#include "dk_lock_private.h"

#include <pthread.h>

static pthread_mutex_t dk__mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t dk__atfork_once = PTHREAD_ONCE_INIT;

static void dk__fork_prepare(void) { pthread_mutex_lock(&dk__mutex); }
static void dk__fork_release(void) { pthread_mutex_unlock(&dk__mutex); }

static void dk__atfork_install(void) { pthread_atfork(dk__fork_prepare, dk__fork_release, dk__fork_release); }

void dk__lock(void)
{
    pthread_once(&dk__atfork_once, dk__atfork_install);
    pthread_mutex_lock(&dk__mutex);
}

void dk__unlock(void) { pthread_mutex_unlock(&dk__mutex); }
