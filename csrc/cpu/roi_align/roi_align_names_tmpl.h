/*
 * roi_align/roi_align_names_tmpl.h — the short names of roi_align's CPU templates (roi_align_tables,
 * _eval, _planes and _drivers_tmpl.h): each includes this at its top, inside its pass's #if, and
 * roi_align_names_end_tmpl.h at its end, so that the names mean the same in all four and leave no
 * trace in the next template. A _tmpl.h, since it means something only inside a template's pass
 * (Note [Templates in C] in kernels/dk_template.h); no include guard: every pass includes it again.
 *   T, V4       the compute type and its 4-lane vector;
 *   AXIS, PAIR, TABLES, SCRATCH, SAMPLE  the per-type structs of roi_align_cpu.h;
 *   S, LOAD, STORE  the storage type and its conversions (float passes only: DK_TMPL_FLOAT).
 */
#define T DK_T
#define V4 DK_TFN(dk_v4)
#define AXIS DK_TFN(dk_roi_align_axis)
#define PAIR DK_TFN(dk__ra_pair)
#define TABLES DK_TFN(dk__ra_tables)
#define SCRATCH DK_TFN(dk__ra_scratch)
#define SAMPLE DK_TFN(dk__ra_sample)
#if DK_TMPL_PASS == DK_TMPL_FLOAT
#define S DK_S
#define LOAD(p) DK_SFN(dk_roi_align_load)(p)
#define STORE(p, v) DK_SFN(dk_roi_align_store)((p), (v))
#endif
