/*
 * dk_cpu_fallback.h — the CPU fallback dkit provides: a backend that has kernels for a few ops
 * turns it on with one call, and every other op runs anyway, on the CPU, through copies.
 *
 * Note [The CPU fallback]
 * dk_register_cpu_fallback(key) registers the core's boxed fallback at a backend key. An op that
 * has neither a kernel nor a composite at that key then runs as follows:
 *   1. the tensor arguments on the backend's device are copied to host memory through the
 *      backend object's copy (dk_backend.h), in its current stream, and the stream is
 *      synchronised; arguments that share device memory (boxes and scores viewing one dets
 *      tensor, an output that aliases an input) share one host copy, so the op sees the same
 *      aliasing on the CPU: overlapping byte spans are merged into one region first;
 *   2. the call is made again through the op's boxed entry with CPU tensors (the relabelled
 *      headers; the caller's are untouched) and every key but CPU excluded on this thread, as
 *      examples/vendor_backend does: the op's checks run once more, now for host memory, where
 *      they also read values (RoI batch indices), and functionality keys (Profile, a user's
 *      layer) that already ran above the fallback do not run twice;
 *   3. every region that holds an argument the schema marks as written (`out`) is copied back,
 *      and the stream synchronised before the host memory is freed.
 * Ops whose output size depends on the data (nms and its family: Note [Data-dependent output
 * sizes]) work unchanged: their bound-sized outputs and counts are outputs like any other.
 * Tensors of no element are passed with no memory. The fallback warns once per op (dk_warn:
 * "runs on the CPU through copies"), and dispatch tables show its slots with provenance
 * "fallback (cpu copy)". It needs a backend object with a copy function for the key's device
 * type (dk_backend_register); without one a call fails with DK_ENOTIMPL naming the backend.
 * Device memory is addressed as DLPack's data + byte_offset, as dk_backend's copy is; a device
 * whose data pointers are opaque handles needs kernels of its own.
 */
#ifndef DK_CPU_FALLBACK_H
#define DK_CPU_FALLBACK_H

#include "dk_op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the CPU fallback at backend key `key` (a vendor's, or cuda/hip): a fallback like any
 * other (newer registrations shadow it, dk_unregister(*out) removes it). DK_EINVAL for a key that
 * is not a backend key or is the CPU's. */
DK_API dk_status dk_register_cpu_fallback(dk_key key, dk_handle *out);

#ifdef __cplusplus
}
#endif
#endif /* DK_CPU_FALLBACK_H */
