#!/usr/bin/python3
"""tests/fuzz/seeds.py — writes the committed seed corpora, tests/fuzz/corpus/<target>/.

Each seed is a handful of bytes that the target decodes (its header comment says how) into a
call that gets past every check: a fuzzer that starts from calls reaching the kernels mutates
them into the hostile ones, where one that starts from nothing spends its time on refusals.
Run it after changing how a target reads its input (or, for fuzz_boxed, the op list):

    /usr/bin/python3 tests/fuzz/seeds.py

fuzz_backend's seeds are the backend fixtures (tests/fuzz/rules.mk), built by make, plus the
small hand-made files written here.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# fuzz_boxed picks its op as byte % count in the op list (dk_op_at): registration order, as
# FZ_TRACE=1 build/fuzz/fuzz_boxed <input> shows.
OPS = ["nms", "soft_nms", "roi_align_forward", "roi_align_backward", "batched_nms"]

F32, F64, F16, BF16, I64 = 0, 1, 2, 3, 4  # fuzz_boxed's dtype bytes (fz_any_dtype)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(bytes(data))


# --- fuzz_boxed ---------------------------------------------------------------------------------
# Header (12): tunables (2), op, pool[0..3] (byte % 7, % 7, % 7, % 5; pool[4..7] = 0, 1, 4, 5),
# stack shape (bit 0: the target's key, bit 1: Profile), short count, values below, two list ints.
# Then 8 bytes for the values below, then 32 bytes per argument.
ARG = 32


def chunk(b):
    assert len(b) <= ARG
    return list(b) + [0] * (ARG - len(b))


def tensor(dims, dtype, values=(0, 1, 0, 0, 0)):
    """dims: indices into the size pool. values: value mode (3: box rows), fill mode, seed."""
    return chunk([1, len(dims)] + list(dims) + [dtype, 1, 0, 0] + list(values))


def boxes_tensor(dims, dtype, rows):
    b = [1, len(dims)] + list(dims) + [dtype, 1, 0, 0, 3]
    for batch, x, y, w, h in rows:  # batch % 3; x, y = (b - 40) / 8; w, h = b / 16
        b += [batch, x, y, w, h]
    return chunk(b)


def none():
    return chunk([0])


def int_arg(v):  # fz_int_arg: b % 12 - 2
    assert -2 <= v <= 9
    return chunk([0, v + 2])


def float_arg(x):  # fz_f64: (b - 100) / 8
    b = int(x * 8 + 100)
    assert 0 <= b < 200
    return chunk([0, b])


def bool_arg(v):
    return chunk([1 if v else 0])


def boxed(op, pool, args, keys=0):
    head = [0, 0, OPS.index(op)] + list(pool) + [keys, 0, 0, 2, 3]
    assert len(head) == 12
    data = head + [0] * 8
    for a in args:
        data += a
    return data


def boxed_seeds():
    # pool: N=2, C=3, H=W=6, K=3; then 0, 1, 4, 5 (indices 4..7)
    pool = [2, 3, 6, 3]
    N, C, HW, K, ONE, FOUR, FIVE = 0, 1, 2, 3, 5, 6, 7
    rows = [(0, 48, 48, 48, 40), (1, 40, 56, 64, 32), (1, 44, 44, 8, 80)]
    x = tensor([N, C, HW, HW], F32)
    rois = boxes_tensor([K, FIVE], F32, rows)
    out = tensor([K, C, FOUR, FOUR], F32)
    for mode, name in ((1, "avg"), (0, "max")):
        am = [tensor([K, C, FOUR, FOUR], F32), tensor([K, C, FOUR, FOUR], F32)] if mode == 0 else [none(), none()]
        tail = [int_arg(4), int_arg(4), float_arg(1.0), int_arg(2), int_arg(mode), bool_arg(True)]
        for keys in (0, 3):
            suffix = "" if keys == 0 else "-through-fallback-and-profile"
            write("fuzz_boxed", f"roi_align_forward-{name}{suffix}",
                  boxed("roi_align_forward", pool, [x, rois, out] + am + tail, keys))
            gout = tensor([K, C, FOUR, FOUR], F32, (0, 0, 7, 0, 0))
            gin = tensor([N, C, HW, HW], F32)
            write("fuzz_boxed", f"roi_align_backward-{name}{suffix}",
                  boxed("roi_align_backward", pool, [gout, rois] + am + [gin] + tail, keys))
    # the other dtypes, avg
    for dt, name in ((F64, "f64"), (F16, "f16"), (BF16, "bf16")):
        args = [tensor([N, C, HW, HW], dt), boxes_tensor([K, FIVE], dt, rows), tensor([K, C, FOUR, FOUR], dt), none(),
                none(), int_arg(4), int_arg(4), float_arg(0.5), int_arg(0), int_arg(1), bool_arg(False)]
        write("fuzz_boxed", f"roi_align_forward-avg-{name}", boxed("roi_align_forward", pool, args))
    if "nms" in OPS:
        boxes = boxes_tensor([K, FOUR], F32, [(0, 48, 48, 48, 40), (0, 50, 50, 48, 40), (0, 90, 90, 16, 16)])
        scores = tensor([K], F32)
        keep = tensor([K], I64)
        num = tensor([ONE], I64)
        idxs = tensor([K], I64, (0, 3, 0, 0, 0))
        write("fuzz_boxed", "nms", boxed("nms", pool, [boxes, scores, none(), keep, num, float_arg(0.5), int_arg(0)]))
        write("fuzz_boxed", "nms-with-categories-offset-1",
              boxed("nms", pool, [boxes, scores, idxs, keep, num, float_arg(0.25), int_arg(1)]))
        write("fuzz_boxed", "batched_nms",
              boxed("batched_nms", pool, [boxes, scores, idxs, keep, num, float_arg(0.5)], 3))
    if "soft_nms" in OPS:
        dets = tensor([K, FIVE], F32)
        inds = tensor([K], I64)
        for method, name in ((0, "naive"), (1, "linear"), (2, "gaussian")):
            write("fuzz_boxed", f"soft_nms-{name}",
                  boxed("soft_nms", pool, [boxes, scores, dets, inds, num, float_arg(0.25), float_arg(0.5),
                                           float_arg(0.0), int_arg(method), int_arg(0)]))


# --- fuzz_dlpack --------------------------------------------------------------------------------
# tunables (2), how (bit 0: writable, bit 1: a NULL legacy tensor), kind (bit 0: versioned; 6: other
# version), [flags], ndim (% 7 below 224), dtype (& 3 below 192: f32, f64, f16, bf16), device
# (below 160: cpu), arrays (& 7 == 0: NULL shape; & 24: NULL strides), sizes (% 6), strides (below
# 128: row-major), memory (& 7 == 0: NULL data; bits 3-4: where the offset goes), then values.
def dlpack_seeds():
    def dl(how, kind, flags, ndim, dtype, device, arrays, sizes, strides, mem):
        b = [0, 0, how, kind]
        if kind & 1:
            b += [flags]
        b += [ndim, dtype, device, arrays] + list(sizes) + list(strides) + [mem]
        return b + [0, 1, 0, 0, 0] + [0] * 40

    write("fuzz_dlpack", "legacy-f32-nchw", dl(1, 0, 0, 4, 0, 0, 9, [2, 3, 5, 5], [], 1))
    write("fuzz_dlpack", "versioned-f32-rois-strided", dl(1, 1, 0, 2, 0, 0, 1, [3, 5], [0, 0], 9))
    write("fuzz_dlpack", "versioned-read-only-for-writing", dl(1, 1, 1, 4, 0, 0, 9, [1, 2, 3, 3], [], 1))
    write("fuzz_dlpack", "versioned-copy-for-reading", dl(0, 1, 2, 4, 1, 0, 9, [1, 2, 3, 3], [], 17))
    write("fuzz_dlpack", "other-major-version", dl(0, 7, 0, 1, 0, 0, 9, [3], [], 1) + [2])
    write("fuzz_dlpack", "f16-byte-offset", dl(1, 0, 0, 4, 2, 0, 9, [1, 1, 4, 4], [], 25))
    write("fuzz_dlpack", "empty-null-data", dl(1, 0, 0, 4, 0, 0, 9, [2, 3, 0, 5], [], 0))
    write("fuzz_dlpack", "rank-65-short-arrays", dl(0, 0, 0, 227, 0, 0, 1, [2, 2], [0, 0], 1))
    write("fuzz_dlpack", "null-shape", dl(0, 0, 0, 2, 0, 0, 0, [], [], 1))
    write("fuzz_dlpack", "cuda-device", dl(0, 1, 0, 4, 0, 162, 9, [1, 1, 2, 2], [], 1))


# --- fuzz_roi_align -----------------------------------------------------------------------------
# tunables (2), N C H W K PH PW (% 10), big (255: none), options (& 3: f32, f64, f16, bf16; 8: max;
# 16: avg; 32: aligned), argmax (0: as the mode wants), scale (0: 1.0), ratio (% 103 - 2), output
# size (0: the tensors'), then layouts, values and boxes.
def roi_align_seeds():
    for opt, name in ((16, "avg-f32"), (8, "max-f32"), (16 | 1 | 32, "avg-f64-aligned"), (8 | 2, "max-f16"),
                      (16 | 3, "avg-bf16")):
        b = [0, 0, 2, 3, 6, 6, 3, 2, 2, 255, opt, 0, 0, 4, 0]
        b += [0, 0] * 5                  # layouts: row-major, pointer in data
        b += [0, 1, 0, 0, 0]             # input values
        for k in range(3):               # boxes: batch, x1, y1, x2, y2 ((b - 40) / 4)
            b += [k % 2, 44, 44, 56 + 4 * k, 60]
        b += [0] * 24                    # backward: layouts and values
        write("fuzz_roi_align", name, b)


# --- fuzz_backend -------------------------------------------------------------------------------
# The file's bytes (fuzz_backend.c): hand-made ELF headers, each wrong in one way; the fixtures
# (real shared objects) are added to the working corpus by make.
def backend_seeds():
    def elf(cls=2, data=1, etype=3, machine=62, phoff=64, phnum=0, size=128):
        e = bytearray(size)
        e[0:4] = b"\x7fELF"
        e[4], e[5], e[6] = cls, data, 1
        struct.pack_into("<HHI", e, 16, etype, machine, 1)
        struct.pack_into("<QQQ", e, 24, 0, phoff, 0)
        struct.pack_into("<IHHHHHH", e, 48, 0, 64, 56, phnum, 64, 0, 0)
        return bytes(e)

    write("fuzz_backend", "elf64-dyn-x86_64-no-phdrs", elf())
    write("fuzz_backend", "elf64-exec", elf(etype=2))
    write("fuzz_backend", "elf64-aarch64", elf(machine=183))
    write("fuzz_backend", "elf32", elf(cls=1))
    write("fuzz_backend", "elf-big-endian", elf(data=2))
    write("fuzz_backend", "phdrs-past-end", elf(phoff=4096, phnum=3))
    write("fuzz_backend", "text", b"#!/bin/sh\necho not a library\n")
    write("fuzz_backend", "empty", b"")


if __name__ == "__main__":
    boxed_seeds()
    dlpack_seeds()
    roi_align_seeds()
    backend_seeds()
