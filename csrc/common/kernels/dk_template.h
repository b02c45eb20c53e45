/*
 * kernels/dk_template.h — one body of code for several dtypes, in C (and CUDA/HIP C++).
 *
 * Note [Templates in C]
 * C has no templates, yet kernel code must exist once and serve float16, bfloat16, float32 and
 * float64 storage (and, for box ops, integer storage). A template is therefore a header written
 * in terms of a few macros, included once per type by kernels/dk_instantiate.h:
 *
 *     #define DK_TEMPLATE "roi_align/roi_align_tables_tmpl.h"   // resolved on the include path
 *     #define DK_TEMPLATE_TYPES (DK_TYPES_COMPUTE | DK_TYPES_FLOAT)
 *     #include "kernels/dk_instantiate.h"
 *
 * runs the template's compute pass for float and double, then its storage pass for every float
 * storage type. Inside a pass the template sees (DK_TMPL_PASS says which pass):
 *
 *   compute pass (DK_TMPL_COMPUTE)     DK_T, DK_TFN(name), DK_T_BYTES, DK_CEIL
 *   storage passes (DK_TMPL_FLOAT,     the above for the compute type, and DK_S (the storage
 *     DK_TMPL_INT)                     type), DK_SFN(name), DK_LOAD(v) (storage -> compute),
 *                                      DK_STORE(v) (compute -> storage), DK_S_IS_T (1 when no
 *                                      conversion is needed), DK_DTYPE (the dk_dtype)
 *
 * DK_TFN(x) is x_f32 or x_f64 (by compute type), DK_SFN(x) is x_f32, x_f64, x_f16, x_bf16,
 * x_i8, x_u8, x_i16, x_i32 or x_i64 (by storage type), so every instantiation has names of its
 * own. A template
 * #undefs the short names it defines for itself at the end of each pass.
 *
 * Calling the right instantiation for a tensor's dtype is DK_SWITCH_FLOAT / DK_SWITCH_INT.
 */
#ifndef DK_KERNELS_TEMPLATE_H
#define DK_KERNELS_TEMPLATE_H

#include "dk_half.h"
#include "dk_hd.h"

#define DK__TCAT_I(a, b) a##b
#define DK__TCAT(a, b) DK__TCAT_I(a, b)

/* The families a template can be instantiated for (DK_TEMPLATE_TYPES is a bitwise or). */
#define DK_TYPES_COMPUTE 1 /* float, double: the compute types */
#define DK_TYPES_FLOAT 2   /* float32, float64, float16, bfloat16 storage */
#define DK_TYPES_INT 4     /* int8, uint8, int16, int32, int64 storage, computed in double */

/* DK_TMPL_PASS, inside a template. */
#define DK_TMPL_COMPUTE 1
#define DK_TMPL_FLOAT 2
#define DK_TMPL_INT 3

/*
 * Calls FN##suffix ARGS for the instantiation serving `dtype`, assigning its result to RESULT;
 * runs DEFAULT for any other dtype. A statement:
 *     DK_SWITCH_FLOAT(dk_tensor_dtype(x), st, dk__my_kernel, (x, y), st = dk_error(...));
 */
#define DK_SWITCH_FLOAT(dtype, RESULT, FN, ARGS, DEFAULT)       \
    switch (dtype) {                                            \
    case DK_FLOAT32: RESULT = DK__TCAT(FN, _f32) ARGS; break;   \
    case DK_FLOAT64: RESULT = DK__TCAT(FN, _f64) ARGS; break;   \
    case DK_FLOAT16: RESULT = DK__TCAT(FN, _f16) ARGS; break;   \
    case DK_BFLOAT16: RESULT = DK__TCAT(FN, _bf16) ARGS; break; \
    default: DEFAULT; break;                                    \
    }

#define DK_SWITCH_INT(dtype, RESULT, FN, ARGS, DEFAULT)     \
    switch (dtype) {                                        \
    case DK_INT8: RESULT = DK__TCAT(FN, _i8) ARGS; break;   \
    case DK_UINT8: RESULT = DK__TCAT(FN, _u8) ARGS; break;  \
    case DK_INT16: RESULT = DK__TCAT(FN, _i16) ARGS; break; \
    case DK_INT32: RESULT = DK__TCAT(FN, _i32) ARGS; break; \
    case DK_INT64: RESULT = DK__TCAT(FN, _i64) ARGS; break; \
    default: DEFAULT; break;                                \
    }

#endif /* DK_KERNELS_TEMPLATE_H */
