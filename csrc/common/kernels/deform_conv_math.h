/*
 * kernels/deform_conv_math.h — deform_conv2d's per-sample math, written once for every backend
 * (host and device; plain C that also compiles as CUDA/HIP C++). ops/deform_conv.h says what the
 * op computes.
 *
 * A sample at (py, px) of an H x W plane (torchvision's bilinear_interpolate): 0 when py <= -1,
 * py >= H, px <= -1 or px >= W; else with y0 = floor(py), x0 = floor(px), ly = py - y0,
 * lx = px - x0, hy = 1 - ly, hx = 1 - lx, the four corners
 *     v1 = (y0, x0) w1 = hy hx    v2 = (y0, x0 + 1) w2 = hy lx
 *     v3 = (y0 + 1, x0) w3 = ly hx    v4 = (y0 + 1, x0 + 1) w4 = ly lx
 * each 0 outside the map, summed w1 v1 + w2 v2 + w3 v3 + w4 v4 in that order.
 *
 * Its derivatives along y and x, by `geometry` (ops/deform_conv.h):
 *     d/dpy = lx (v4 - v2) + hx (v3 - v1),   d/dpx = ly (v4 - v3) + hy (v2 - v1),
 * DK_DEFORM_CONV_TORCHVISION: torchvision's get_coordinate_weight, which has no outer test: a
 *     sample at exactly -1 has corners inside the map, and a derivative, though its value is 0;
 * DK_DEFORM_CONV_MMCV: MMCV's (get_coordinate_weight and dmcn_get_coordinate_weight), 0 for a
 *     sample outside (py <= -1, py >= H, px <= -1 or px >= W), like its value. A zero-initialised
 *     DCN "Pack" layer with padding samples exactly at -1, so the two differ there at once.
 * and the input receives g w_k at corner k (only where the sample's value is not forced to 0:
 * torchvision's gradient goes to the corners within distance 1, the same set).
 *
 * dk_deform_conv_sample_* (compute types float, double) finds a sample's corners once: their
 * plane offsets, their weights with 0 for a corner outside, which corners are inside (a caller
 * reads and writes those only: a 0 weight times an infinite pixel elsewhere would be NaN), and
 * ly, lx for the derivatives; dk_deform_conv_value_*, _dy_*, _dx_* combine the corners' values.
 */
#ifndef DK_KERNELS_DEFORM_CONV_MATH_H
#define DK_KERNELS_DEFORM_CONV_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dk_half.h"
#include "dk_hd.h"
#include "dk_template.h"

/* Whose derivatives at the map's edge (above; ops/deform_conv.h's numbering). */
enum { DK_DEFORM_CONV_TORCHVISION = 0, DK_DEFORM_CONV_MMCV = 1 };

#define DK_TEMPLATE "kernels/deform_conv_math_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "dk_instantiate.h"

#endif /* DK_KERNELS_DEFORM_CONV_MATH_H */
