"""Static memory planning: every intermediate gets an offset in one caller-provided workspace.

Views share their base's storage.  Buffers whose lifetimes don't overlap share bytes;
placement is greedy by size (largest first, lowest offset that fits) which lands close to
the lower bound (the peak of simultaneously live bytes), reported next to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pt2c.ir import Graph, Value
from pt2c.ops import OPS

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class Storage:
    kind: str  # "input" | "output" | "const" | "arena"
    index: int = 0  # input/output position
    offset: int = 0  # byte offset in the arena (arena) or blob (const)


@dataclass
class MemoryPlan:
    roots: dict[int, Value]  # id(value) -> root value whose storage it uses
    elem_offset: dict[int, int]  # id(value) -> element offset inside the root
    storage: dict[int, Storage]  # id(root) -> where it lives
    arena_bytes: int = 0
    scratch_bytes: int = 0
    lower_bound: int = 0
    lifetimes: dict[int, tuple[int, int]] = field(default_factory=dict)

    def root(self, v: Value) -> Value:
        return self.roots.get(id(v), v)

    @property
    def workspace_bytes(self) -> int:
        return self.arena_bytes + self.scratch_bytes


def plan_memory(g: Graph) -> MemoryPlan:
    roots: dict[int, Value] = {}
    elem_off: dict[int, int] = {}
    for n in g.nodes:
        if OPS[n.op].alias:
            src, out = n.inputs[0], n.outputs[0]
            base = roots.get(id(src), src)
            roots[id(out)] = base
            elem_off[id(out)] = elem_off.get(id(src), 0) + n.attrs.get("offset", 0)
    storage: dict[int, Storage] = {}
    for i, v in enumerate(g.inputs):
        storage[id(v)] = Storage("input", i)
    for j, v in enumerate(g.outputs):
        r = roots.get(id(v), v)
        # an output that is a full-size view of an intermediate: let the intermediate live in the output
        if id(r) not in storage and not r.is_const and elem_off.get(id(v), 0) == 0 and r.numel == v.numel:
            storage[id(r)] = Storage("output", j)
    plan = MemoryPlan(roots, elem_off, storage)

    # lifetimes of arena roots: [first write, last read]
    life: dict[int, list[int]] = {}
    rootv: dict[int, Value] = {}
    for t, n in enumerate(g.nodes):
        for v in n.outputs:
            r = plan.root(v)
            if id(r) not in storage and not r.is_const:
                life.setdefault(id(r), [t, t])
                rootv[id(r)] = r
        for v in n.inputs:
            r = plan.root(v)
            if id(r) in life:
                life[id(r)][1] = max(life[id(r)][1], t)
    # greedy by size
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, start, end)
    arena = 0
    for rid in sorted(life, key=lambda k: (-rootv[k].nbytes, life[k][0])):
        size = _align(max(rootv[rid].nbytes, 1))
        s, e = life[rid]
        overlapping = sorted((o, sz) for o, sz, s2, e2 in placed if not (e2 < s or e < s2))
        off = 0
        for o, sz in overlapping:
            if off + size <= o:
                break
            off = max(off, o + sz)
        placed.append((off, size, s, e))
        storage[rid] = Storage("arena", offset=off)
        arena = max(arena, off + size)
    plan.arena_bytes = arena
    plan.lifetimes = {k: (v[0], v[1]) for k, v in life.items()}
    # lower bound: peak of simultaneously live (aligned) bytes
    peak = 0
    for t in range(len(g.nodes)):
        peak = max(peak, sum(_align(max(rootv[k].nbytes, 1)) for k, (s, e) in life.items() if s <= t <= e))
    plan.lower_bound = peak
    plan.scratch_bytes = _align(max([OPS[n.op].scratch(n) for n in g.nodes if OPS[n.op].scratch] or [0]))
    return plan
