/*
 * kernels/focal_loss_math_tmpl.h — the template body of kernels/focal_loss_math.h (Note
 * [Templates in C] in dk_template.h). Included only through dk_instantiate.h.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

DK_HD DK_INLINE_ALWAYS DK_T DK_TFN(dk_focal_expneg)(DK_T y)
{
#if DK_T_BYTES == 4
    return dk_focal_expneg_poly(y);
#else
    return exp(y);
#endif
}

DK_HD DK_INLINE DK_T DK_TFN(dk_focal_omexp)(DK_T y)
{
#if DK_T_BYTES == 4
    return dk_focal_omexp_poly(y);
#else
    return -expm1(y);
#endif
}

DK_HD DK_INLINE_ALWAYS DK_T DK_TFN(dk_focal_log1p)(DK_T e)
{
#if DK_T_BYTES == 4
    return dk_focal_log1p_poly(e);
#else
    return log1p(e);
#endif
}

/* log, for the storage pass (which has no DK_TMATH). */
DK_HD DK_INLINE DK_T DK_TFN(dk_focal_log)(DK_T v) { return DK_TMATH(log)(v); }

/* Note [A row in lanes]: the lanes' maxima taken in lane order, as each lane took its values. */
DK_HD DK_INLINE DK_T DK_TFN(dk_focal_row_max)(const DK_T *m)
{
    DK_T top = m[0];
    for (int j = 1; j < DK_FOCAL_ROW_LANES; j++) top = m[j] > top ? m[j] : top;
    return top;
}

/* Note [A row in lanes]: the lanes' sums as a tree, ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)). */
DK_HD DK_INLINE DK_T DK_TFN(dk_focal_row_sum)(const DK_T *s)
{
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* One element's sigmoid pieces (Note [Focal loss arithmetic]): p, q = 1 - p, the cross-entropy
 * ce and m = 1 - p_t. */
typedef struct {
    DK_T p, q, ce, m;
} DK_TFN(dk_focal_sig);

DK_HD DK_INLINE_ALWAYS DK_TFN(dk_focal_sig) DK_TFN(dk_focal_sig_parts)(DK_T x, DK_T t)
{
    DK_TFN(dk_focal_sig) s;
    const DK_T one = 1, ax = DK_TMATH(fabs)(x);
    const DK_T e = DK_TFN(dk_focal_expneg)(-ax), d = one + e;
    const DK_T up = x >= 0 ? one : e, uq = x >= 0 ? e : one; /* selects of values (the Note) */
    const DK_T relu = x < 0 ? ax : (DK_T)0;                  /* max(-x, 0) */
    s.p = up / d;
    s.q = uq / d;
    s.ce = ((one - t) * x + relu) + DK_TFN(dk_focal_log1p)(e);
    s.m = s.p * (one - t) + s.q * t;
    return s;
}

/* m^gamma and its derivative, as `kind` says (DK_FOCAL_POW_*); gamma 0 has derivative 0 (torch's
 * pow backward), not 0 * m^-1. */
DK_HD DK_INLINE_ALWAYS DK_T DK_TFN(dk_focal_pow)(DK_T m, DK_T gamma, int kind)
{
    return kind == DK_FOCAL_POW_2 ? m * m : DK_TMATH(pow)(m, gamma);
}

DK_HD DK_INLINE_ALWAYS DK_T DK_TFN(dk_focal_dpow)(DK_T m, DK_T gamma, int kind)
{
    if (kind == DK_FOCAL_POW_2) return (DK_T)2 * m;
    return gamma == 0 ? (DK_T)0 : gamma * DK_TMATH(pow)(m, gamma - (DK_T)1);
}

/* a ce m^gamma, a = alpha_pos t + alpha_neg (1 - t) (ops/focal_loss.h). */
DK_HD DK_INLINE_ALWAYS DK_T DK_TFN(dk_focal_sigmoid_loss)(DK_T x, DK_T t, DK_T gamma, DK_T alpha_pos, DK_T alpha_neg,
                                                          int kind)
{
    const DK_TFN(dk_focal_sig) s = DK_TFN(dk_focal_sig_parts)(x, t);
    const DK_T a = alpha_pos * t + alpha_neg * ((DK_T)1 - t);
    return a * (s.ce * DK_TFN(dk_focal_pow)(s.m, gamma, kind));
}

/* d loss / d x, *dt = d loss / d t, and *loss the loss (dk_focal_sigmoid_loss's bits):
 *   dce/dx = p - t, dm/dx = p q (1 - 2t), dce/dt = -x, dm/dt = q - p, da/dt = alpha_pos - alpha_neg. */
DK_HD DK_INLINE_ALWAYS DK_T DK_TFN(dk_focal_sigmoid_grad)(DK_T x, DK_T t, DK_T gamma, DK_T alpha_pos, DK_T alpha_neg,
                                                          int kind, DK_T *dt, DK_T *loss)
{
    const DK_T one = 1;
    const DK_TFN(dk_focal_sig) s = DK_TFN(dk_focal_sig_parts)(x, t);
    const DK_T a = alpha_pos * t + alpha_neg * (one - t);
    const DK_T mg = DK_TFN(dk_focal_pow)(s.m, gamma, kind), dmg = DK_TFN(dk_focal_dpow)(s.m, gamma, kind);
    const DK_T dce = s.p * (one - t) - s.q * t;
    const DK_T dm = s.p * s.q * (one - (DK_T)2 * t);
    *dt = (alpha_pos - alpha_neg) * (s.ce * mg) + a * (s.ce * dmg * (s.q - s.p) - x * mg);
    *loss = a * (s.ce * mg);
    return a * (dce * mg + s.ce * dmg * dm);
}

/* One row's softmax focal loss, from its target's logit xl and the row's max and log-sum-exp:
 * -alpha (1 - s)^gamma log s, s = exp(xl - mx - lse); and *buff, the factor b of ops/focal_loss.h
 * (MMCV's buff): alpha (gamma (1 - s)^(gamma - 1) s log s - (1 - s)^gamma), so that
 * d loss / d x_c = b (delta(c, l) - s_c). */
DK_HD DK_INLINE DK_T DK_TFN(dk_focal_softmax_loss)(DK_T xl, DK_T mx, DK_T lse, DK_T gamma, DK_T alpha, DK_T *buff)
{
    const DK_T logs = (xl - mx) - lse;
    /* logs <= 0: xl <= mx and lse >= 0 (NaN aside); 1 - s without cancellation */
    const DK_T s = DK_TFN(dk_focal_expneg)(logs), om = DK_TFN(dk_focal_omexp)(logs);
    const int kind = gamma == 2 ? DK_FOCAL_POW_2 : DK_FOCAL_POW_ANY;
    const DK_T mg = DK_TFN(dk_focal_pow)(om, gamma, kind), dmg = DK_TFN(dk_focal_dpow)(om, gamma, kind);
    *buff = alpha * (dmg * s * logs - mg);
    return -alpha * mg * logs;
}

/* Column c's softmax probability for the backward (Note [The softmax's backward]): e =
 * dk_focal_expneg(x_c - max) times inv = 1 / the row's total (dk_focal_softmax_inv). */
DK_HD DK_INLINE DK_T DK_TFN(dk_focal_softmax_inv)(DK_T total) { return (DK_T)1 / total; }
DK_HD DK_INLINE DK_T DK_TFN(dk_focal_softmax_prob)(DK_T e, DK_T inv) { return e * inv; }

#elif DK_TMPL_PASS == DK_TMPL_FLOAT

/* The maximum of a row of C values (stride sc; NaN never wins, and reaches the log-sum-exp
 * through its exp), *total = sum exp(x - max) and *lse its log, in DK_FOCAL_ROW_LANES lanes (Note
 * [A row in lanes], kernels/focal_loss_math.h). */
DK_HD DK_INLINE void DK_SFN(dk_focal_softmax_row)(const DK_S *row, int64_t C, int64_t sc, DK_T *mx, DK_T *total,
                                                  DK_T *lse)
{
    DK_T m[DK_FOCAL_ROW_LANES], sum[DK_FOCAL_ROW_LANES];
    for (int j = 0; j < DK_FOCAL_ROW_LANES; j++) m[j] = -(DK_T)INFINITY, sum[j] = 0;
    for (int64_t c = 0; c < C; c++) {
        const DK_T v = DK_LOAD(row[c * sc]);
        m[c % DK_FOCAL_ROW_LANES] = v > m[c % DK_FOCAL_ROW_LANES] ? v : m[c % DK_FOCAL_ROW_LANES];
    }
    const DK_T top = DK_TFN(dk_focal_row_max)(m);
    for (int64_t c = 0; c < C; c++) sum[c % DK_FOCAL_ROW_LANES] += DK_TFN(dk_focal_expneg)(DK_LOAD(row[c * sc]) - top);
    *mx = top;
    *total = DK_TFN(dk_focal_row_sum)(sum);
    *lse = DK_TFN(dk_focal_log)(*total);
}

#endif
