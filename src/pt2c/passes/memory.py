"""The last passes: graph outputs made plannable, then static memory planning.

- materialize_outputs: every graph output becomes a distinct value the planner can place in the
  caller's output buffer (inputs, constants, repeated outputs and offset views get a copy).
- plan_memory: every intermediate gets an offset in one caller-provided workspace.  Views share
  their base's storage; graph outputs are written straight into the caller's buffers.  Buffers
  whose lifetimes don't overlap share bytes; placement is greedy by size (largest first, lowest
  offset that fits), which lands close to the lower bound (the peak of simultaneously live
  bytes), reported next to it.  Dynamic sizes are planned at their upper bounds.  The plan (ir.MemoryPlan, plain data by value name) is returned
  beside the graph; `ops.verify(graph, plan)` checks it.
"""

from __future__ import annotations

from pt2c.ir import Buffer, Graph, MemoryPlan, Node, Value, reads, schedule, walk
from pt2c.ops import OPS, scratch_bytes
from pt2c.ops.elementwise import e_in


__all__ = ["ALIGN", "Buffer", "MemoryPlan", "materialize_outputs", "plan_memory"]

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def write_state(g: Graph) -> Graph:
    """A program's mutated buffers (g.meta["state"]): their new values, kept as the last graph outputs through
    the optimisation passes, leave the outputs and are copied into the state at the end of the run (one
    state_write node each; none for a buffer whose value the run leaves as it was)."""
    st = g.meta.get("state")
    if not st or len(g.outputs) == st["outputs"]:
        return g
    states = {n.attrs["index"]: n.outputs[0] for n in g.nodes if n.op == "state"}
    new = g.outputs[st["outputs"]:]
    g.outputs = g.outputs[:st["outputs"]]
    users = g.users()
    for k, v in enumerate(new):
        if k not in states or v is states[k]:
            continue
        p = v.producer
        if (p is not None and p.op == "index_put" and p.inputs[0] is states[k] and users.get(id(states[k])) == [p]
                and states[k] not in g.outputs and v not in g.outputs):
            p.attrs["inplace"] = True  # the cache updated where it lives: no copy of it, in or out
            continue
        g.nodes.append(Node("state_write", [v, states[k]], {"index": k}, []))
    return g


def materialize_outputs(g: Graph) -> Graph:
    """Make every graph output a distinct value the planner can place in the caller's output
    buffer: inputs, constants, repeated outputs and offset views get an explicit copy."""
    seen: set[int] = set()
    for j, v in enumerate(g.outputs):
        root = v
        off = 0
        while root.producer is not None and OPS[root.producer.op].alias:
            off += root.producer.attrs.get("offset", 0)
            root = root.producer.inputs[0]
        bad = (root.is_const or root in g.inputs or id(root) in seen or off != 0 or root.numel != v.numel)
        if bad:
            cp = Value(f"{v.name}_out", v.shape, v.dtype)
            g.nodes.append(Node("ew", [v], {"expr": e_in(v.dtype, 0)}, [cp]))
            g.outputs[j] = cp
            seen.add(id(cp))
        else:
            seen.add(id(root))
    return g


def plan_memory(g: Graph) -> MemoryPlan:
    values: dict[str, Value] = {v.name: v for v in g.inputs}
    aliases: dict[str, tuple[str, int]] = {}  # view name -> (root name, element offset)
    for n in walk(g):
        for v in n.inputs + n.outputs:
            values.setdefault(v.name, v)
        if OPS[n.op].alias or n.attrs.get("inplace"):
            src, out = n.inputs[0], n.outputs[0]
            base, off = aliases.get(src.name, (src.name, 0))
            aliases[out.name] = (base, off + n.attrs.get("offset", 0))
    for v in g.outputs:
        values.setdefault(v.name, v)

    def root(v: Value) -> Value:
        a = aliases.get(v.name)
        return v if a is None else values[a[0]]

    storage: dict[str, Buffer] = {}
    states = [n.outputs[0] for n in walk(g) if n.op == "state"]
    for v in states:  # (offsets after the arena and scratch, below)
        storage[v.name] = Buffer("state", index=len(storage), nbytes=_align(v.max_nbytes))
    for i, v in enumerate(g.inputs):
        storage[v.name] = Buffer("input", i, nbytes=v.max_nbytes)
    for j, v in enumerate(g.outputs):
        r = root(v)
        # an output that is a full-size view of an intermediate: let the intermediate live in the output
        if r.name not in storage and not r.is_const and aliases.get(v.name, ("", 0))[1] == 0 and r.numel == v.numel:
            storage[r.name] = Buffer("output", j, nbytes=r.max_nbytes)

    # lifetimes of arena roots: [first write, last read], over the schedule (ir.schedule: control-flow
    # blocks in line, a loop's outer values and state live until it ends)
    life: dict[str, list[int]] = {}
    steps = schedule(g)
    for t, (n, when) in enumerate(steps):
        for v in n.outputs if when != "end" else ():
            r = root(v)
            if r.name not in storage and not r.is_const:
                life.setdefault(r.name, [t, t])
        for v in reads(n, when):
            r = root(v)
            if r.name in life:
                life[r.name][1] = max(life[r.name][1], t)
    # greedy by size
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, start, end)
    arena = 0
    for k in sorted(life, key=lambda k: (-values[k].max_nbytes, life[k][0])):
        size = _align(max(values[k].max_nbytes, 1))
        s, e = life[k]
        overlapping = sorted((o, sz) for o, sz, s2, e2 in placed if not (e2 < s or e < s2))
        off = 0
        for o, sz in overlapping:
            if off + size <= o:
                break
            off = max(off, o + sz)
        placed.append((off, size, s, e))
        storage[k] = Buffer("arena", offset=off, nbytes=size, first=s, last=e)
        arena = max(arena, off + size)
    # lower bound: peak of simultaneously live (aligned) bytes
    peak = 0
    for t in range(len(steps)):
        peak = max(peak, sum(_align(max(values[k].max_nbytes, 1)) for k, (s, e) in life.items() if s <= t <= e))
    scratch = _align(max([scratch_bytes(n, g.meta.get("dims")) for n in walk(g) if OPS[n.op].scratch] or [0]))
    off = arena + scratch
    for v in states:  # the state region: after the arena and scratch, for the whole life of the context
        storage[v.name] = Buffer("state", storage[v.name].index, offset=off, nbytes=storage[v.name].nbytes)
        off += storage[v.name].nbytes
    return MemoryPlan(storage, aliases, arena_bytes=arena, scratch_bytes=scratch, lower_bound=peak, align=ALIGN,
                      values=values, state_bytes=off - arena - scratch)
