"""A naive NumPy reference of MMCV's roi_align (avg and max), forward and backward, in float64.

Written from the definition, loop by loop, for clarity rather than speed:

  * box k = (b, x1, y1, x2, y2) maps to input coordinates by * spatial_scale, then - 0.5 when
    aligned; without aligned, the RoI is at least 1x1.
  * the RoI is cut into PH x PW bins; each bin is sampled on a grid of gh x gw points at the
    centres of a regular sub-grid, gh = sampling_ratio if > 0 else ceil(roi_h / PH) (same for w).
  * every point is bilinearly interpolated: 0 if outside [-1, H] x [-1, W]; otherwise clamped
    into the image (coordinates < 0 become 0, a point in the last row/column uses that
    row/column only).
  * avg: mean over the points (sum / max(gh * gw, 1)); max: the largest value (first on ties,
    strict '>'), whose point gets the whole gradient.
"""

import math

import numpy as np


def _bilinear_taps(h, w, y, x):
    """[(row, col, weight), ...] for sampling the point (y, x); [] if it is outside."""
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return []
    y = max(y, 0.0)
    x = max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= h - 1:
        y_low = y_high = h - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= w - 1:
        x_low = x_high = w - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx
    return [(y_low, x_low, hy * hx), (y_low, x_high, hy * lx), (y_high, x_low, ly * hx), (y_high, x_high, ly * lx)]


def _bins(roi, ph_n, pw_n, spatial_scale, sampling_ratio, aligned):
    """For each bin (ph, pw): the list of its sampling points (y, x)."""
    offset = 0.5 if aligned else 0.0
    x1, y1, x2, y2 = (float(v) * spatial_scale for v in roi[1:5])
    x1, y1, x2, y2 = x1 - offset, y1 - offset, x2 - offset, y2 - offset
    rw, rh = x2 - x1, y2 - y1
    if not aligned:
        rw, rh = max(rw, 1.0), max(rh, 1.0)
    bh, bw = rh / ph_n, rw / pw_n
    gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rh / ph_n))
    gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rw / pw_n))
    out = {}
    for ph in range(ph_n):
        for pw in range(pw_n):
            pts = []
            for iy in range(max(gh, 0)):
                y = y1 + ph * bh + (iy + 0.5) * bh / gh
                for ix in range(max(gw, 0)):
                    x = x1 + pw * bw + (ix + 0.5) * bw / gw
                    pts.append((y, x))
            out[ph, pw] = (pts, max(gh * gw, 1))
    return out


def roi_align(x, rois, output_size, spatial_scale=1.0, sampling_ratio=0, pool_mode="avg", aligned=True,
              grad_output=None):  # fmt: skip
    """Returns output [K, C, PH, PW] (float64) and, if grad_output is given, grad_input."""
    x = np.asarray(x, dtype=np.float64)
    rois = np.asarray(rois, dtype=np.float64)
    ph_n, pw_n = (output_size, output_size) if isinstance(output_size, int) else output_size
    n, c, h, w = x.shape
    k = rois.shape[0]
    out = np.zeros((k, c, ph_n, pw_n))
    grad_in = np.zeros_like(x) if grad_output is not None else None
    if grad_output is not None:
        grad_output = np.asarray(grad_output, dtype=np.float64)
    for r in range(k):
        b = int(rois[r, 0])
        img = x[b]
        for (ph, pw), (pts, count) in _bins(rois[r], ph_n, pw_n, spatial_scale, sampling_ratio, aligned).items():
            taps = [_bilinear_taps(h, w, y, xx) for y, xx in pts]
            vals = [sum((wt * img[:, yy, xc] for yy, xc, wt in t), np.zeros(c)) for t in taps]
            if pool_mode == "avg":
                out[r, :, ph, pw] = sum(vals, np.zeros(c)) / count
                if grad_in is not None:
                    g = grad_output[r, :, ph, pw] / count
                    for t in taps:
                        for yy, xc, wt in t:
                            grad_in[b, :, yy, xc] += wt * g
            else:
                for ch in range(c):
                    best, best_i = -np.inf, -1
                    for i, v in enumerate(vals):
                        if v[ch] > best:
                            best, best_i = v[ch], i
                    out[r, ch, ph, pw] = best if best_i >= 0 else 0.0
                    if grad_in is not None and best_i >= 0:
                        for yy, xc, wt in taps[best_i]:
                            grad_in[b, ch, yy, xc] += wt * grad_output[r, ch, ph, pw]
    return (out, grad_in) if grad_output is not None else out
