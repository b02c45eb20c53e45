/*
 * dk_determinism.c — a thread's request for deterministic kernels (Note [Deterministic kernels]
 * in dk_determinism.h).
 */
#include "dk_determinism.h"

static _Thread_local bool dk__deterministic;

bool dk_deterministic(void) { return dk__deterministic; }

bool dk_set_deterministic(bool on)
{
    const bool previous = dk__deterministic;
    dk__deterministic = on;
    return previous;
}
