"""Attention reads its operands where they are and writes its output where it is read.

A transformer splits one projection into heads with views: GPT-2's fused QKV linear is sliced into
q, k and v, each reshaped to [B, L, H, D] and permuted to [B, H, L, D]; the output is permuted back
to [B, L, H, D] and reshaped for the next linear. Each permute is a `strided` copy, six per layer.
The attention kernel takes each operand's batch, head and row strides (`pt2c_sdpa_layout`), so
this pass follows every q, k and v back through its chain of `view` / `strided` nodes to the buffer
that holds the data, works out the strides that chain amounts to, and hands the kernel that buffer
with those strides; and when the output's only reader is a permute, the kernel writes straight into
the permuted buffer. The copies become dead code.

Also folded: grouped-query attention written out as expand + reshape (Llama's repeat_kv): the kernel
maps query head h to kv head h // (H / Hkv) itself, so k and v are read with their own Hkv heads.
"""

from __future__ import annotations

from pt2c.ir import Graph, Node, Value
from pt2c.ops.util import contiguous_strides
from pt2c.sym import DynamicSizeError

Layout = tuple[tuple[int, ...], tuple[int, ...], int]  # shape, element strides, element offset


def reshape_strides(shape: tuple[int, ...], strides: tuple[int, ...], new: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides that give the same elements in the same order as `new`-shaped (torch's view rule:
    dims may be split or merged only where the memory is contiguous between them); None if not."""
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    out: list[int] = []
    i = 0
    for n in new:
        if n == 1:
            out.append(0)
            continue
        if i >= len(dims):
            return None
        size, stride = dims[i]
        if size % n == 0:  # split this (chunk of a) dim
            out.append(stride * (size // n))
            dims[i] = (size // n, stride)
            if dims[i][0] == 1:
                i += 1
            continue
        # merge this dim with the following ones, which must continue it in memory
        acc, inner = size, stride
        j = i + 1
        while acc < n and j < len(dims) and dims[j - 1][1] == dims[j][0] * dims[j][1]:
            acc *= dims[j][0]
            inner = dims[j][1]
            j += 1
        if acc != n:
            return None
        out.append(inner)
        i = j
    return tuple(out) if i == len(dims) else None


def compose(src: Layout, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Layout | None:
    """The layout of a `strided` read (shape, strides, offset over the source's dense element order)
    of a source that itself has layout `src`; None unless every step of the read stays in one dim
    of the source (or, with dynamic sizes, where that depends on the sizes)."""
    try:
        return _compose(src, shape, strides, offset)
    except DynamicSizeError:
        return None


def _compose(src: Layout, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Layout | None:
    sshape, sstrides, soff = src
    dense = contiguous_strides(sshape)
    idx0, rest = [], offset
    for d in dense:
        idx0.append(rest // d)
        rest %= d
    used = list(idx0)
    out: list[int] = []
    for n, st in zip(shape, strides):
        if st == 0 or n == 1:
            out.append(0)
            continue
        k = next((k for k, d in enumerate(dense) if st % d == 0 and st // d < sshape[k]), None)
        if k is None:
            return None
        c = st // dense[k]
        used[k] += (n - 1) * c
        if used[k] >= sshape[k]:
            return None
        out.append(c * sstrides[k])
    return tuple(shape), tuple(out), soff + sum(i * s for i, s in zip(idx0, sstrides))


def layout_of(v: Value) -> tuple[Value, Layout, int] | None:
    """(the buffer v's elements live in, v's layout over it, the kv heads of a folded GQA expand or 0),
    following view / strided producers; None if the chain cannot be expressed as strides."""
    chain: list[Node] = []
    base = v
    while base.producer is not None and base.producer.op in ("view", "strided"):
        chain.append(base.producer)
        base = base.producer.inputs[0]
    if not chain:
        return None
    lay: Layout = (base.shape, contiguous_strides(base.shape), 0)
    kv_heads = 0
    for n in reversed(chain):
        out = n.outputs[0]
        if n.op == "strided":
            new = compose(lay, out.shape, tuple(n.attrs["strides"]), n.attrs["offset"])
        else:
            off = n.attrs.get("offset", 0)
            st = reshape_strides(lay[0], lay[1], out.shape) if off == 0 or lay[1] == contiguous_strides(lay[0]) else None
            new = (out.shape, st, lay[2] + off) if st is not None else None
            if new is None and len(lay[0]) == 5 and len(out.shape) == 4 and lay[1][2] == 0 \
                    and out.shape[1] == lay[0][1] * lay[0][2] and tuple(out.shape[2:]) == tuple(lay[0][3:]):
                # [B, Hkv, rep, L, D] with the rep dim broadcast, read as [B, Hkv * rep, L, D]: GQA
                kv_heads = lay[0][1]
                new = ((out.shape[0], kv_heads, *out.shape[2:]), (lay[1][0], lay[1][1], *lay[1][3:]), lay[2])
        if new is None:
            return None
        lay = new
    return base, lay, kv_heads


def fold_attention_views(g: Graph) -> Graph:
    """Give each sdpa node the buffers its q, k, v views read and the permuted buffer its output is
    copied into, with their strides (attrs "layout": q / k / v as (batch, head, row, offset), out as
    (batch, head, row, 0); "dims": B, H, Hkv, Lq, Lk, D, Dv, which the inputs' shapes no longer say)."""
    users = g.users()
    outputs = {id(v) for v in g.outputs}
    for n in g.nodes:
        if n.op != "sdpa" or "layout" in n.attrs:
            continue
        q, k, v = n.inputs[:3]
        out = n.outputs[0]
        B, H, Lq, D = q.shape
        Hkv, Lk, Dv = k.shape[1], k.shape[2], v.shape[3]
        found = {name: layout_of(x) for name, x in (("q", q), ("k", k), ("v", v))}
        for name in found:  # a row's D elements must be contiguous
            if found[name] is not None and found[name][1][1][3] != 1:
                found[name] = None
        if found["q"] is not None and found["q"][2]:
            found["q"] = None
        kv = {found[t][2] if found[t] is not None else 0 for t in ("k", "v")}
        if len(kv) != 1:
            found["k"] = found["v"] = None  # a GQA fold needs both k and v folded alike
            kv = {0}
        layout: dict[str, tuple[int, ...]] = {}
        for i, (name, x) in enumerate((("q", q), ("k", k), ("v", v))):
            f = found[name]
            if f is None:
                layout[name] = (*contiguous_strides(x.shape)[:3], 0)
                continue
            base, (_, st, off), _ = f
            layout[name] = (st[0], st[1], st[2], off)
            n.inputs[i] = base
        layout["out"] = (*contiguous_strides(out.shape)[:3], 0)
        us = users.get(id(out), [])
        if len(us) == 1 and us[0].op == "strided" and id(out) not in outputs and us[0].attrs["offset"] == 0:
            p = us[0]
            st = tuple(p.attrs["strides"])
            dense = contiguous_strides(out.shape)
            # (a permutation of the dense strides; sorted by text: dynamic strides have no order)
            if sorted(map(str, st)) == sorted(map(str, dense)) and len(set(st)) == len(st) and st[-1] == 1:
                # P[..i..] = O[..k..] where st[i] == dense[k]: O's dim k has P's dense stride of dim i
                pd = contiguous_strides(p.outputs[0].shape)
                layout["out"] = (pd[st.index(dense[0])], pd[st.index(dense[1])], pd[st.index(dense[2])], 0)
                n.outputs = [p.outputs[0]]
                p.outputs[0].producer = n
                p.outputs[0].name = out.name  # the buffer is the attention's
                g.nodes = [m for m in g.nodes if m is not p]
        if any(f is not None for f in found.values()) or n.outputs[0] is not out:
            n.attrs["layout"] = layout
            n.attrs["dims"] = (B, H, kv.pop() or Hkv, Lq, Lk, D, Dv)
    return g
