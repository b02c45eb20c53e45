/*
 * myvendor.c — an out-of-tree dkit backend for a "toy accelerator", with zero per-op code.
 *
 * The toy device is DLPack's kDLExtDev (the device type DLPack reserves for out-of-tree
 * devices), and its memory is ordinary host memory. The backend registers one thing: a boxed
 * fallback at its dispatch key. A boxed kernel receives any op's arguments as a stack of tagged
 * values described by the op's schema (op->args, op->nargs), so this one function serves every
 * dkit op — roi_align_forward, roi_align_backward, and any op added after this library was
 * built — by running the op's CPU kernel on the same memory.
 *
 * This is DESIGN.md's "copy to CPU, run there, copy back" fallback; for this device the copies
 * are the identity. Note [Where a real device copies] says what changes for a device with its
 * own memory.
 *
 * Built against dkit's public headers and libdkit only (see Makefile); loaded at run time with
 * dk_load_backend(path) from C or dkit.load_backend(path) from Python.
 */
#include "dkit.h"

/*
 * Note [Running on CPU from a fallback]
 * The tensors are relabelled as CPU tensors (copies of their DLTensor headers; the caller's
 * headers are not touched) and the op is called again through its boxed entry, so the op's
 * check runs once more, now for CPU tensors. That matters: some checks only run where the host
 * can read the data (roi_align verifies RoI batch indices on CPU tensors only, and its CPU
 * kernel relies on that), and the outer call, made with toy-device tensors, skipped them.
 *
 * While it runs, every key but CPU is excluded on this thread: functionality kernels (Profile,
 * user layers) already ran above this fallback and must not run twice, and excluding this
 * backend's own key rules out recursion even if a thread included it.
 *
 * Note [Where a real device copies]
 * With device memory of its own, a backend would, in the loop below, allocate a host buffer
 * per tensor and copy the device data into it (outputs too, as an op may read them), point
 * the relabelled header at the buffer, run the op, then copy every argument whose schema entry
 * has `out` set back to the device, and free the buffers. Argument aliasing (two arguments
 * viewing one buffer) must then be preserved by the copies.
 */
static dk_status myvendor_run_on_cpu(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)ks;
    (void)ctx;
    const dk_value *args = dk_stack_args(stack, op);
    dk_tensor host[DK_STACK_MAX]; /* DK_STACK_MAX bounds an op's argument count */
    dk_stack inner;
    dk_stack_init(&inner);

    for (int i = 0; i < op->nargs; i++) {
        dk_value v = args[i];
        if (v.tag == DK_TYPE_TENSOR && v.u.t) {
            host[i] = *v.u.t;
            /* Host memory: a CPU tensor with the same data pointer, offset, shape and strides. */
            host[i].device.device_type = kDLCPU;
            host[i].device.device_id = 0;
            v = dk_value_tensor(&host[i]);
        }
        dk_status st = dk_stack_push(&inner, v);
        if (st != DK_OK) return st;
    }

    dk_tls_state saved = dk_tls_push_exclude(~DK_KEYSET(DK_KEY_CPU));
    dk_status st = dk_op_call_boxed(op, &inner);
    dk_tls_pop(saved);
    return st;
}

DK_BACKEND_ENTRY(myvendor)
{
    dk_key key;
    /* dk_load_backend runs this once per path; claiming the same name and device type again
     * (the library loaded from a second path) returns the same key. */
    dk_status st = dk_backend_key_register("myvendor", kDLExtDev, &key);
    if (st != DK_OK) return st;
    return dk_register_fallback(key, dk_kernel_boxed(myvendor_run_on_cpu, NULL, "myvendor_run_on_cpu"), NULL);
}
