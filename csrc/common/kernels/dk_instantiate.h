/*
 * kernels/dk_instantiate.h — includes DK_TEMPLATE once per type of the families in
 * DK_TEMPLATE_TYPES (Note [Templates in C] in dk_template.h), then forgets both. No include
 * guard: it is included once per template.
 */
#if !defined(DK_TEMPLATE) || !defined(DK_TEMPLATE_TYPES)
#error "define DK_TEMPLATE (the template's path) and DK_TEMPLATE_TYPES before including dk_instantiate.h"
#endif

#include "dk_template.h"

#define DK__IDENTITY(v) (v)

/* ---- compute pass: float, double ---------------------------------------------------------- */
#if (DK_TEMPLATE_TYPES) & DK_TYPES_COMPUTE
#define DK_TMPL_PASS DK_TMPL_COMPUTE
#define DK_T float
#define DK_TFN(name) DK__TCAT(name, _f32)
#define DK_T_BYTES 4
#define DK_CEIL ceilf
#define DK_TMATH(fn) fn##f /* <math.h>'s function for DK_T: DK_TMATH(exp) is expf */
#include DK_TEMPLATE
#undef DK_T
#undef DK_TFN
#undef DK_T_BYTES
#undef DK_CEIL
#undef DK_TMATH
#define DK_T double
#define DK_TFN(name) DK__TCAT(name, _f64)
#define DK_T_BYTES 8
#define DK_CEIL ceil
#define DK_TMATH(fn) fn
#include DK_TEMPLATE
#undef DK_T
#undef DK_TFN
#undef DK_T_BYTES
#undef DK_CEIL
#undef DK_TMATH
#undef DK_TMPL_PASS
#endif

/* ---- storage pass: float32, float16, bfloat16 (computed in float), float64 ---------------- */
#if (DK_TEMPLATE_TYPES) & DK_TYPES_FLOAT
#define DK_TMPL_PASS DK_TMPL_FLOAT
#define DK_T float
#define DK_TFN(name) DK__TCAT(name, _f32)
#define DK_T_BYTES 4
#define DK_CEIL ceilf

#define DK_S float
#define DK_SFN(name) DK__TCAT(name, _f32)
#define DK_LOAD DK__IDENTITY
#define DK_STORE DK__IDENTITY
#define DK_S_IS_T 1
#define DK_DTYPE DK_FLOAT32
#include DK_TEMPLATE
#undef DK_S
#undef DK_SFN
#undef DK_LOAD
#undef DK_STORE
#undef DK_S_IS_T
#undef DK_DTYPE

#define DK_S uint16_t
#define DK_SFN(name) DK__TCAT(name, _f16)
#define DK_LOAD dk_half_to_float
#define DK_STORE dk_float_to_half
#define DK_S_IS_T 0
#define DK_DTYPE DK_FLOAT16
#include DK_TEMPLATE
#undef DK_S
#undef DK_SFN
#undef DK_LOAD
#undef DK_STORE
#undef DK_S_IS_T
#undef DK_DTYPE

#define DK_S uint16_t
#define DK_SFN(name) DK__TCAT(name, _bf16)
#define DK_LOAD dk_bfloat16_to_float
#define DK_STORE dk_float_to_bfloat16
#define DK_S_IS_T 0
#define DK_DTYPE DK_BFLOAT16
#include DK_TEMPLATE
#undef DK_S
#undef DK_SFN
#undef DK_LOAD
#undef DK_STORE
#undef DK_S_IS_T
#undef DK_DTYPE

#undef DK_T
#undef DK_TFN
#undef DK_T_BYTES
#undef DK_CEIL
#define DK_T double
#define DK_TFN(name) DK__TCAT(name, _f64)
#define DK_T_BYTES 8
#define DK_CEIL ceil
#define DK_S double
#define DK_SFN(name) DK__TCAT(name, _f64)
#define DK_LOAD DK__IDENTITY
#define DK_STORE DK__IDENTITY
#define DK_S_IS_T 1
#define DK_DTYPE DK_FLOAT64
#include DK_TEMPLATE
#undef DK_S
#undef DK_SFN
#undef DK_LOAD
#undef DK_STORE
#undef DK_S_IS_T
#undef DK_DTYPE
#undef DK_T
#undef DK_TFN
#undef DK_T_BYTES
#undef DK_CEIL
#undef DK_TMPL_PASS
#endif

/* ---- storage pass: int8, uint8, int16, int32, int64 (computed in double) ------------------ */
#if (DK_TEMPLATE_TYPES) & DK_TYPES_INT
#define DK_TMPL_PASS DK_TMPL_INT
#define DK_T double
#define DK_TFN(name) DK__TCAT(name, _f64)
#define DK_T_BYTES 8
#define DK_CEIL ceil
#define DK_LOAD(v) ((double)(v))
#define DK_STORE(v) (v)
#define DK_S_IS_T 0

#define DK_S int8_t
#define DK_SFN(name) DK__TCAT(name, _i8)
#define DK_DTYPE DK_INT8
#include DK_TEMPLATE
#undef DK_S
#undef DK_SFN
#undef DK_DTYPE

#define DK_S uint8_t
#define DK_SFN(name) DK__TCAT(name, _u8)
#define DK_DTYPE DK_UINT8
#include DK_TEMPLATE
#undef DK_S
#undef DK_SFN
#undef DK_DTYPE

#define DK_S int16_t
#define DK_SFN(name) DK__TCAT(name, _i16)
#define DK_DTYPE DK_INT16
#include DK_TEMPLATE
#undef DK_S
#undef DK_SFN
#undef DK_DTYPE

#define DK_S int32_t
#define DK_SFN(name) DK__TCAT(name, _i32)
#define DK_DTYPE DK_INT32
#include DK_TEMPLATE
#undef DK_S
#undef DK_SFN
#undef DK_DTYPE

#define DK_S int64_t
#define DK_SFN(name) DK__TCAT(name, _i64)
#define DK_DTYPE DK_INT64
#include DK_TEMPLATE
#undef DK_S
#undef DK_SFN
#undef DK_DTYPE

#undef DK_T
#undef DK_TFN
#undef DK_T_BYTES
#undef DK_CEIL
#undef DK_LOAD
#undef DK_STORE
#undef DK_S_IS_T
#undef DK_TMPL_PASS
#endif

#undef DK__IDENTITY
#undef DK_TEMPLATE
#undef DK_TEMPLATE_TYPES
