"""Scratch sizes of the kernels, mirrored from their C `*_scratch_floats` functions so the
workspace is known at compile time.  The generated init re-checks them against the C
functions and refuses to run (an internal error) if a mirror ever drifts."""

from __future__ import annotations

MAX_THREADS = 8  # PT2C_MAX_THREADS
MR, NR = 6, 16  # PT2C_GEMM_MR / NR
MC, KC, NC = 144, 256, 2048  # PT2C_GEMM_MC / KC / NC
CONV_COL_FLOATS = 1 << 19  # PT2C_CONV_COL_FLOATS
SDPA_BQ, SDPA_BK, SDPA_NR = 64, 64, 16


def _r16(n: int) -> int:
    return (n + 15) & ~15


def sgemm_scratch_floats(M: int, N: int, K: int) -> int:
    if M <= 0 or N <= 0 or K <= 0:
        return 0
    mc = min(MC, (M + MR - 1) // MR * MR)
    nc = min(NC, (N + NR - 1) // NR * NR)
    kc = min(KC, K)
    return MAX_THREADS * (_r16(mc * kc) + _r16(kc * nc))


def conv2d_scratch_floats(C: int, H: int, W: int, OC: int, KH: int, KW: int, sh: int, sw: int, ph: int, pw: int,
                          dh: int, dw: int, groups: int, OH: int, OW: int) -> int:
    Cg, OCg, OHW = C // groups, OC // groups, OH * OW
    Kg = Cg * KH * KW
    if OHW <= 0 or OCg <= 0:
        return 0
    if KH == 1 and KW == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0:
        return sgemm_scratch_floats(OCg, OHW, Cg)
    t = CONV_COL_FLOATS // max(Kg, 1) // NR * NR
    full = (OHW + NR - 1) // NR * NR
    return Kg * max(NR, min(t, full))


def sdpa_scratch_floats(Lq: int, Lk: int, D: int, Dv: int) -> int:
    lk = (max(Lk, 1) + SDPA_NR - 1) // SDPA_NR * SDPA_NR
    bq, bk = max(1, min(SDPA_BQ, Lq)), min(SDPA_BK, lk)
    return MAX_THREADS * (D * bk + bq * bk + bq * Dv + 2 * bq)
