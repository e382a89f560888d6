"""Packed operand layouts of the pt2c GEMM (must match kernels/gemm.c).

A (M x K) is cut into panels of MR rows: element (i, k) lives at
``(i // MR) * MR * K + k * MR + i % MR``; B (K x N) into panels of NR columns:
element (k, j) at ``(j // NR) * NR * K + k * NR + j % NR``.  Rows/columns past
the matrix are zero.  The layouts do not depend on the kernel's cache blocking.
"""

from __future__ import annotations

import numpy as np

MR = 6   # PT2C_GEMM_MR
NR = 16  # PT2C_GEMM_NR


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def pack_a(a: np.ndarray) -> np.ndarray:
    """M x K -> flat float32 array of ceil(M/MR) panels of K x MR."""
    a = np.asarray(a, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"pack_a expects a 2-D array, got shape {a.shape}")
    m, k = a.shape
    mp = _round_up(m, MR)
    padded = np.zeros((mp, k), dtype=np.float32)
    padded[:m] = a
    # (panels, MR, K) -> (panels, K, MR)
    return np.ascontiguousarray(padded.reshape(mp // MR, MR, k).transpose(0, 2, 1)).reshape(-1)


def pack_b(b: np.ndarray) -> np.ndarray:
    """K x N -> flat float32 array of ceil(N/NR) panels of K x NR."""
    b = np.asarray(b, dtype=np.float32)
    if b.ndim != 2:
        raise ValueError(f"pack_b expects a 2-D array, got shape {b.shape}")
    k, n = b.shape
    np_ = _round_up(n, NR)
    padded = np.zeros((k, np_), dtype=np.float32)
    padded[:, :n] = b
    # (K, panels, NR) -> (panels, K, NR)
    return np.ascontiguousarray(padded.reshape(k, np_ // NR, NR).transpose(1, 0, 2)).reshape(-1)


def packed_a_size(m: int, k: int) -> int:
    return _round_up(m, MR) * k


def packed_b_size(k: int, n: int) -> int:
    return k * _round_up(n, NR)


BF16_NR = 32  # PT2C_BF16_NR (kernels/gemm_bf16.c)


def pack_b_bf16(b: np.ndarray) -> np.ndarray:
    """K x N (float32 holding bfloat16 values) -> flat uint16 bfloat16 bits: ceil(N/32) panels of Kp/2 rows of
    32 column pairs, element (k, j) at (j // 32) * 32 * Kp + (k // 2) * 64 + (j % 32) * 2 + k % 2 (Kp: K rounded
    up to a multiple of 32; padding zero).  Rounds to nearest even (exact for bfloat16 values)."""
    from pt2c.ops.elementwise import bf16_bits

    b = np.asarray(b, dtype=np.float32)
    if b.ndim != 2:
        raise ValueError(f"pack_b_bf16 expects a 2-D array, got shape {b.shape}")
    k, n = b.shape
    kp, np_ = _round_up(k, 32), _round_up(n, BF16_NR)
    padded = np.zeros((kp, np_), dtype=np.uint16)
    padded[:k, :n] = bf16_bits(b)
    # (Kp/2, 2, panels, 32) -> (panels, Kp/2, 32, 2)
    return np.ascontiguousarray(padded.reshape(kp // 2, 2, np_ // BF16_NR, BF16_NR).transpose(2, 0, 3, 1)).reshape(-1)


def unpack_b_bf16(p: np.ndarray, k: int, n: int) -> np.ndarray:
    """pack_b_bf16's inverse, as float32."""
    from pt2c.ops.elementwise import bf16_float

    kp, np_ = _round_up(k, 32), _round_up(n, BF16_NR)
    bits = np.asarray(p, np.uint16).reshape(np_ // BF16_NR, kp // 2, BF16_NR, 2).transpose(1, 3, 0, 2).reshape(kp, np_)
    return np.ascontiguousarray(bf16_float(bits[:k, :n]))


def packed_b_bf16_size(k: int, n: int) -> int:
    return _round_up(k, 32) * _round_up(n, BF16_NR)


# Winograd F(4x4, 3x3) filter transform (kernels/conv.c pt2c_conv2d_wino): U = G g G^T.
WINO_G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                   [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])


def pack_winograd_weight(w: np.ndarray, groups: int = 1) -> np.ndarray:
    """OIHW 3x3 conv weight -> the 36 A operands of pt2c_conv2d_wino: for each position
    xi = r*6 + s of the 6x6 transform, U_xi[o, c] = (G w[o, c] G^T)[r, s] (computed in float64),
    packed with pack_a; the 36 matrices follow one another.  Grouped (w: [O, C/groups, 3, 3]): the 36
    operands of each group's O/groups filters, group after group (one kernel call per group)."""
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 4 or w.shape[2:] != (3, 3) or w.shape[0] % groups:
        raise ValueError(f"pack_winograd_weight expects OIHW 3x3, got shape {w.shape}")
    out = []
    for wg in np.split(w, groups):
        u = np.einsum("rk,ocks,ts->rtoc", WINO_G, wg, WINO_G)  # (6, 6, O/groups, C/groups)
        u = u.reshape(36, wg.shape[0], wg.shape[1]).astype(np.float32)
        out += [pack_a(u[i]) for i in range(36)]
    return np.concatenate(out)


def pack_conv_weight_t(w: np.ndarray) -> np.ndarray:
    """OIHW conv weight (ungrouped) -> the B operand of pt2c_conv2d_smallp: W^T[C*KH*KW, OC]
    (k = c*KH*KW + kh*KW + kw, the im2col row order) packed with pack_b."""
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 4:
        raise ValueError(f"pack_conv_weight_t expects OIHW, got shape {w.shape}")
    return pack_b(w.reshape(w.shape[0], -1).T)


def pack_conv_weight(w: np.ndarray, groups: int = 1) -> np.ndarray:
    """OIHW conv weight -> the A operand of pt2c_conv2d.

    Per group g the matrix W_g[OC/groups, (C/groups)*KH*KW] (k = c*KH*KW + kh*KW + kw,
    the im2col row order) is packed with pack_a; groups follow one another.
    """
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 4:
        raise ValueError(f"pack_conv_weight expects OIHW, got shape {w.shape}")
    oc = w.shape[0]
    if groups < 1 or oc % groups:
        raise ValueError(f"out channels {oc} not divisible by groups {groups}")
    ocg = oc // groups
    kg = w.shape[1] * w.shape[2] * w.shape[3]
    parts = [pack_a(w[g * ocg:(g + 1) * ocg].reshape(ocg, kg)) for g in range(groups)]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)
