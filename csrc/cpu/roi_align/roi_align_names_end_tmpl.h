/* roi_align/roi_align_names_end_tmpl.h — the end of roi_align_names_tmpl.h's short names (see there). */
#undef T
#undef V4
#undef AXIS
#undef PAIR
#undef TABLES
#undef SCRATCH
#undef SAMPLE
#undef S
#undef LOAD
#undef STORE
