"""Scratch sizes of the kernels, mirrored from their C `*_scratch_floats` functions so the
workspace is known at compile time.  The generated init re-checks them against the C
functions and refuses to run (an internal error) if a mirror ever drifts."""

from __future__ import annotations

MAX_THREADS = 8  # PT2C_MAX_THREADS
SMALLP_KSPLIT = 4  # PT2C_SMALLP_KSPLIT
MR, NR = 6, 16  # PT2C_GEMM_MR / NR
MC, KC, NC = 144, 256, 2048  # PT2C_GEMM_MC / KC / NC
SKINNY_M = 16  # PT2C_GEMM_SKINNY_M
MIN_MACS_PER_THREAD = 1 << 19  # PT2C_GEMM_MIN_MACS_PER_THREAD
CHUNKS_PER_THREAD = 4  # PT2C_GEMM_CHUNKS_PER_THREAD
SHARED_A_FLOATS = 1 << 20  # PT2C_GEMM_SHARED_A_FLOATS
CONV_PAD_SLACK = 32  # PT2C_CONV_PAD_SLACK
CONV_PAD_FLOATS = 1 << 20  # PT2C_CONV_PAD_FLOATS
SDPA_BQ, SDPA_BK, SDPA_NR = 64, 64, 16
WINO_FLOATS = 1 << 19  # PT2C_WINO_FLOATS
DW_DIRECT_MIN_HW = 1024  # PT2C_DW_DIRECT_MIN_HW
DW_S2_MIN_OW = 16  # PT2C_DW_S2_MIN_OW
DW_CB_FLOATS = 16384  # PT2C_DW_CB_FLOATS
PWDW_GROUP_FLOATS, PWDW_GROUP_MAX = 163840, 24  # PT2C_PWDW_GROUP_FLOATS / _MAX


def _r16(n: int) -> int:
    return (n + 15) & ~15


def _gemm_thread_floats(M: int, N: int, K: int, a_packed: bool, b_packed: bool) -> int:
    mc = min(MC, (M + MR - 1) // MR * MR)
    nc = min(NC, (N + NR - 1) // NR * NR)
    kc = min(KC, K)
    return (_r16(mc * kc) if not a_packed and M > SKINNY_M else 0) + (_r16(kc * nc) if not b_packed else 0)


def sgemm_plan(M: int, N: int, K: int, nt_avail: int, a_packed: bool = False) -> tuple[int, bool, int, int, int]:
    """pt2c_gemm_plan: (threads, split_n, chunks, rows of the largest chunk, its columns)."""
    macs = max(M, SKINNY_M) * N * K  # a skinny product counts as 16 rows (memory-bound on B)
    mt, npan = (M + MR - 1) // MR, (N + NR - 1) // NR
    nt = min(nt_avail, macs // MIN_MACS_PER_THREAD)
    split_n = npan >= nt and (N >= M or mt < nt) and not (a_packed and M > K and mt >= 2 * nt)
    nt = max(1, min(nt, npan if split_n else mt))
    units = npan if split_n else mt
    nc = min(units, nt * CHUNKS_PER_THREAD, macs // (MIN_MACS_PER_THREAD // 2)) if nt > 1 else 1
    nc = max(nc, nt)
    cu = (units + nc - 1) // nc
    cm = M if nc == 1 or split_n else min(M, cu * MR)
    cn = N if nc == 1 or not split_n else min(N, cu * NR)
    return nt, split_n, nc, cm, cn


BF16_SLAB, BF16_ROWS = 256, 256  # PT2C_GEMM_BF16_SLAB / _ROWS


def gemm_bf16_scratch_bytes(M: int, N: int, K: int) -> int:
    """pt2c_gemm_bf16_scratch_bytes (kernels/gemm_bf16.c)."""
    fallback = 4 * (K * BF16_SLAB + sgemm_scratch_floats(M, min(N, BF16_SLAB), K, b_packed=True))
    amx = (min(M, BF16_ROWS) + 31) // 32 * 32 * ((K + 31) // 32 * 32) * 2
    return max(fallback, amx)


def sgemm_scratch_floats(M: int, N: int, K: int, a_packed: bool = False, b_packed: bool = False) -> int:
    """pt2c_sgemm_scratch_floats_ex (pt2c_sgemm_scratch_floats: both unpacked): the most any
    number of threads 1..MAX_THREADS needs, one region per thread."""
    if M <= 0 or N <= 0 or K <= 0:
        return 0
    best = 0
    apack = (M + MR - 1) // MR * MR * K
    for avail in range(1, MAX_THREADS + 1):
        nt, split_n, nc, cm, cn = sgemm_plan(M, N, K, avail, a_packed)
        if not a_packed and M > SKINNY_M and split_n and nc > 1 and apack <= SHARED_A_FLOATS:  # A packed once, shared
            need = _r16(apack) + nt * _gemm_thread_floats(cm, cn, K, True, b_packed)
        else:
            need = nt * _gemm_thread_floats(cm, cn, K, a_packed, b_packed)
        best = max(best, need)
    return best


def conv_extent(n: int, p: int, o: int, s: int, k: int, d: int) -> int:
    """pt2c_conv_extent: the zero-padded input a conv reads along one dim (n + 2p, or more where the output
    size asks for more padding after the input than before)."""
    return max(n + 2 * p, (o - 1) * s + d * (k - 1) + 1)


def _conv_pad_floats(C: int, H: int, W: int, Hp: int, Wp: int) -> int:
    """pt2c_conv_pad_floats: the zero-padded copy of the input, if padded and within CONV_PAD_FLOATS."""
    pad = C * Hp * Wp + CONV_PAD_SLACK
    return _r16(pad) if (Hp > H or Wp > W) and pad <= CONV_PAD_FLOATS else 0


def conv2d_scratch_floats(C: int, H: int, W: int, OC: int, KH: int, KW: int, sh: int, sw: int, ph: int, pw: int,
                          dh: int, dw: int, groups: int, OH: int, OW: int) -> int:
    Cg, OCg, OHW = C // groups, OC // groups, OH * OW
    if OHW <= 0 or OCg <= 0:
        return 0
    if KH == 1 and KW == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0 and (OH, OW) == (H, W):
        return sgemm_scratch_floats(OCg, OHW, Cg, a_packed=True)
    if (KH == 1 and KW == 1 and ph == 0 and pw == 0 and (OH - 1) * sh < H and (OW - 1) * sw < W
            and Cg * OHW <= CONV_PAD_FLOATS):  # strided 1x1: subsampled input
        return _r16(Cg * OHW) + sgemm_scratch_floats(OCg, OHW, Cg, a_packed=True)
    Hp, Wp = conv_extent(H, ph, OH, sh, KH, dh), conv_extent(W, pw, OW, sw, KW, dw)
    return _conv_pad_floats(Cg, H, W, Hp, Wp) + MAX_THREADS * (2 * KC * NR + NR)  # the padded input, two B micro-panels per thread


def conv2d_rt_scratch_floats(C: int, H: int, W: int, OC: int, KH: int, KW: int, sh: int, sw: int, ph: int, pw: int,
                             dh: int, dw: int, groups: int, OH: int, OW: int) -> int:
    """pt2c_conv2d_rt: the weights packed at run time (an A operand per group), then pt2c_conv2d's scratch."""
    Cg, OCg = C // groups, OC // groups
    if OH * OW <= 0 or OCg <= 0:
        return 0
    return (_r16(groups * ((OCg + MR - 1) // MR * MR) * Cg * KH * KW)
            + conv2d_scratch_floats(C, H, W, OC, KH, KW, sh, sw, ph, pw, dh, dw, groups, OH, OW))


def conv2d_smallp_scratch_floats(C: int, H: int, W: int, OC: int, KH: int, KW: int, sh: int, sw: int, ph: int,
                                 pw: int, dh: int, dw: int, OH: int, OW: int) -> int:
    P, K = OH * OW, C * KH * KW
    if P <= 0 or OC <= 0:
        return 0
    ksplit = K >= OC and K >= 2 * 64 and P * OC * K >= 2 * MIN_MACS_PER_THREAD  # pt2c_smallp_ksplit_ok
    out_t = _r16(P * OC) * (SMALLP_KSPLIT if ksplit else 1)  # each thread's outT
    if KH == 1 and KW == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0 and (OH, OW) == (H, W):
        one = sgemm_scratch_floats(P, OC, K, a_packed=False, b_packed=True)
        split = SMALLP_KSPLIT * sgemm_scratch_floats(P, OC, (K + 1) // 2, a_packed=False, b_packed=True) if ksplit else 0
        return out_t + max(one, split)  # (a GEMM scratch per thread)
    Hp, Wp = conv_extent(H, ph, OH, sh, KH, dh), conv_extent(W, pw, OW, sw, KW, dw)
    return out_t + (P + MR - 1) // MR * MR * K + _conv_pad_floats(C, H, W, Hp, Wp)  # im2col, the padded input


def _wino_block_tiles(C: int, OC: int, P: int) -> int:
    per = 36 * (C + OC)
    nmax = max(16, WINO_FLOATS // per // 16 * 16)
    ppad = (P + 15) // 16 * 16
    nb = (ppad + nmax - 1) // nmax
    return ((P + nb - 1) // nb + 15) // 16 * 16


def conv2d_wino_scratch_floats(C: int, OC: int, OH: int, OW: int) -> int:
    P = ((OH + 3) // 4) * ((OW + 3) // 4)
    if P <= 0 or C <= 0 or OC <= 0:
        return 0
    return 36 * (C + OC) * _wino_block_tiles(C, OC, P)


def conv2d_depthwise_scratch_floats(H: int, W: int, OH: int, OW: int, KH: int, KW: int, sh: int, sw: int, ph: int,
                                    pw: int, dh: int, dw: int) -> int:
    """pt2c_conv2d_depthwise_scratch_floats: none on the direct path (stride 1, "same" padding, a
    plane larger than DW_DIRECT_MIN_HW), four split input rows per thread on the stride-2 3x3 path,
    else one band of 8 interleaved channels per thread."""
    if OH <= 0 or OW <= 0:
        return 0
    if ((sh, sw, dh, dw) == (1, 1, 1, 1) and (OH, OW) == (H, W) and 2 * ph == KH - 1 and 2 * pw == KW - 1
            and OH * OW > DW_DIRECT_MIN_HW):
        return 0
    if ((KH, KW, sh, sw, ph, pw, dh, dw) == (3, 3, 2, 2, 1, 1, 1, 1) and (OH, OW) == ((H + 1) // 2, (W + 1) // 2)
            and OW >= DW_S2_MIN_OW):
        return MAX_THREADS * 4 * (2 * ((OW + 15) & ~15) + 16)
    WP = (OW - 1) * sw + (KW - 1) * dw + 1
    fixed = KH * KW + 1 + ((KH - 1) * dh + 1) * WP
    B = max(1, min((DW_CB_FLOATS // 8 - fixed) // (sh * WP + OW), OH))
    HB = (B - 1) * sh + (KH - 1) * dh + 1
    return MAX_THREADS * ((8 * (HB * WP + B * OW + KH * KW + 1) + 64 + 15) & ~15)


def pwdw_group(M: int, H: int, W: int) -> int:
    """pt2c_pwdw_group: channels per group of pt2c_conv2d_pw_dw."""
    g = PWDW_GROUP_FLOATS // (H * W) // MR * MR
    return min(M, max(MR, min(PWDW_GROUP_MAX, g)))


def conv2d_pw_dw_scratch_floats(C: int, H: int, W: int, M: int, KH: int, KW: int, sh: int, sw: int, ph: int, pw: int,
                                dh: int, dw: int, OH: int, OW: int) -> int:
    """pt2c_conv2d_pw_dw_scratch_floats: per thread (at most one per group) a group's planes of the
    1x1 conv's output and its GEMM's packing buffer, then the depthwise conv's scratch."""
    if M <= 0 or OH <= 0 or OW <= 0 or H <= 0 or W <= 0:
        return 0
    G = pwdw_group(M, H, W)
    per = _r16(G * H * W) + _r16(_gemm_thread_floats(G, H * W, C, True, False))
    return (min(MAX_THREADS, (M + G - 1) // G) * per
            + conv2d_depthwise_scratch_floats(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw))


def sdpa_scratch_floats(Lq: int, Lk: int, D: int, Dv: int) -> int:
    lk = (max(Lk, 1) + SDPA_NR - 1) // SDPA_NR * SDPA_NR
    bq, bk = max(1, min(SDPA_BQ, Lq)), min(SDPA_BK, lk)
    return MAX_THREADS * (D * bk + bq * bk + bq * Dv + 2 * bq + bk * Dv)
