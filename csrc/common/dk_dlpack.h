/*
 * dk_dlpack.h — the DLPack ABI, written for dkit from the DLPack specification
 * (v1.0: DLDevice, DLDataType, DLTensor, DLManagedTensor, DLManagedTensorVersioned).
 *
 * Every tensor that crosses a dkit boundary — Python, a backend library, a kernel — is a
 * DLTensor. The layouts and enum values below are the ABI: they must match the spec bit for
 * bit, so never reorder fields or renumber codes. The names follow the spec so that code
 * written against other DLPack headers reads the same here; the include guard differs so this
 * header can sit beside another copy without clashing (the struct tags would, so a translation
 * unit includes only one).
 */
#ifndef DK_DLPACK_H
#define DK_DLPACK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the DLPack ABI these layouts describe. */
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

/* Where a tensor's memory lives. The values are fixed by the spec. */
typedef enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3, /* pinned host memory, readable by the CPU */
    kDLOpenCL = 4,
    kDLVulkan = 7,
    kDLMetal = 8,
    kDLVPI = 9,
    kDLROCM = 10,
    kDLROCMHost = 11, /* pinned host memory, readable by the CPU */
    kDLExtDev = 12,   /* reserved for out-of-tree devices */
    kDLCUDAManaged = 13,
    kDLOneAPI = 14,
    kDLWebGPU = 15,
    kDLHexagon = 16,
    kDLMAIA = 17,
} DLDeviceType;

typedef struct {
    /* The spec stores the enum; it is an int32_t in every ABI we target. */
    DLDeviceType device_type;
    int32_t device_id;
} DLDevice;

typedef enum {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLOpaqueHandle = 3,
    kDLBfloat = 4,
    kDLComplex = 5,
    kDLBool = 6,
    kDLFloat8_e3m4 = 7,
    kDLFloat8_e4m3 = 8,
    kDLFloat8_e4m3b11fnuz = 9,
    kDLFloat8_e4m3fn = 10,
    kDLFloat8_e4m3fnuz = 11,
    kDLFloat8_e5m2 = 12,
    kDLFloat8_e5m2fnuz = 13,
    kDLFloat8_e8m0fnu = 14,
    kDLFloat6_e2m3fn = 15,
    kDLFloat6_e3m2fn = 16,
    kDLFloat4_e2m1fn = 17,
} DLDataTypeCode;

typedef struct {
    uint8_t code;   /* a DLDataTypeCode */
    uint8_t bits;   /* bits per lane: 8, 16, 32, 64 */
    uint16_t lanes; /* 1 for scalars */
} DLDataType;

/*
 * A strided view. `shape` and `strides` have `ndim` entries; strides count elements, not
 * bytes, and NULL strides mean compact row-major. The first element is at
 * (char *)data + byte_offset.
 */
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;

/* The legacy ("dltensor" capsule) owner: the consumer calls deleter(self) when done. */
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

/* Flags of DLManagedTensorVersioned. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2)

/* The versioned ("dltensor_versioned" capsule) owner. Note the different field order. */
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#ifdef __cplusplus
}
#endif
#endif /* DK_DLPACK_H */
