"""The C API of a model with dynamic sizes or state (codegen/cwriter.py writes them in):

- sizes (a dim the export declared dynamic, pt2c.sym): the size in the context (`<name>_ctx.sizes`), the
  sizes table with each range (`<name>_sizes`), `<name>_set_sizes` (range checks: `<NAME>_ERR_SIZE`) and the
  inputs' / outputs' shapes at the context's sizes (`<name>_input_shape`, `<name>_output_shape`);
- state (a buffer the program mutates, ops `state` / `state_write`): `<name>_reset_state`, which init calls
  too, copying each buffer's export-time value from the weights into its place in the workspace.
"""

from __future__ import annotations

import re

from pt2c.codegen.escape import c_comment, c_string
from pt2c.ir import Graph, MemoryPlan, Value


def json_shape(shape: tuple) -> list:
    """A shape for manifest.json: ints, and a dynamic size as its C expression ("ids_size1", "2 * ids_size0")."""
    return [s if isinstance(s, int) else str(s) for s in shape]


def sizes_header(g: Graph, name: str) -> tuple[str, str]:
    """(the ctx member holding the sizes, the header's declarations of the size functions); empty strings for a
    model without dynamic sizes."""
    dims = g.meta.get("dims")
    if not dims:
        return "", ""
    N = name.upper()
    ctx_sizes = f"\n    int64_t sizes[{N}_NUM_SIZES]; /* the run-time sizes ({name}_set_sizes; the example's after init) */"
    rows = "\n".join(f" *   {i}: {d.cname} ({c_comment(d.where)}), {d.lo}..{d.hi}" for i, d in enumerate(dims.dims))
    return ctx_sizes, f"""
/* Dynamic sizes.  The model was compiled for a range of sizes:
{rows}
 * {name}_set_sizes sets the sizes the next runs use (init sets the example's: {', '.join(str(d.hint) for d in dims.dims)});
 * inputs and outputs are dense at those sizes ({name}_input_shape / {name}_output_shape), and the
 * descriptor tables above give their shapes at the example's sizes.  A size out of its range gives
 * {N}_ERR_SIZE and leaves the context as it was.  The workspace is planned for the largest sizes. */
typedef struct {name}_size_desc {{
    const char *name;
    const char *where; /* the input dim that has this size */
    int64_t min;
    int64_t max;
}} {name}_size_desc;
int {name}_num_sizes(void);
const {name}_size_desc *{name}_sizes(void);
int {name}_set_sizes({name}_ctx *ctx, const int64_t *sizes);
/* The shape of input / output `index` at the context's sizes (rank entries written). */
int {name}_input_shape(const {name}_ctx *ctx, int index, int64_t *shape);
int {name}_output_shape(const {name}_ctx *ctx, int index, int64_t *shape);
"""


def state_header(g: Graph, plan: MemoryPlan, name: str) -> str:
    st = g.meta.get("state")
    if not st or not plan.state_bytes:
        return ""
    N = name.upper()
    names = ", ".join(c_comment(n) for n in st["names"][:6]) + (", ..." if len(st["names"]) > 6 else "")
    return f"""
/* State: the model updates {len(st['names'])} buffer(s) from run to run ({names}: a KV cache, a step
 * counter ...).  They live in the workspace ({N}_STATE_BYTES of {N}_WORKSPACE_BYTES), so one context +
 * workspace holds one sequence's state.  init sets them to their values at export; {name}_reset_state
 * does that again (a new sequence). */
#define {N}_STATE_BYTES {plan.state_bytes}u
int {name}_reset_state(const {name}_ctx *ctx);
"""


def state_source(g: Graph, plan: MemoryPlan, const_offsets: dict[int, int], name: str) -> str:
    """<name>_reset_state: each state's initial value (a constant in the weights) copied into its place."""
    states = [n for n in g.nodes if n.op == "state"]
    if not states:
        return ""
    N = name.upper()
    copies = "\n".join(f"    memcpy(ctx->workspace + {plan.buffers[n.outputs[0].name].offset}, ctx->weights + "
                       f"{const_offsets[id(n.inputs[0])]}, {n.outputs[0].nbytes}); "
                       f"/* {c_comment(g.meta['state']['names'][n.attrs['index']])} */" for n in states)
    return f"""
int {name}_reset_state(const {name}_ctx *ctx)
{{
    if (!ctx) return {N}_ERR_NULL_ARG;
    if (ctx->initialized != 0x70743263u) return {N}_ERR_NOT_INITIALIZED;
{copies}
    return {N}_OK;
}}
"""


def sizes_source(g: Graph, name: str) -> str:
    """The C of a dynamic model's size functions: the sizes table, set_sizes (range checks), input / output shapes."""
    N = name.upper()
    dims = g.meta["dims"]
    rows = ",\n".join(f"    {{{c_string(d.cname)}, {c_string(d.where)}, {d.lo}, {d.hi}}}" for d in dims.dims)

    def shapes(fn: str, vals: list[Value]) -> str:
        cases = []
        for i, v in enumerate(vals):
            sets = " ".join(f"shape[{k}] = (int64_t)({n});" for k, n in enumerate(v.shape))
            cases.append(f"    case {i}: {sets} return {N}_OK;" if sets else f"    case {i}: return {N}_OK;")
        body = "\n".join(cases)
        used = [d for d in dims.dims if re.search(rf"\b{d.cname}\b", body)]
        decl = "".join(f"\n    const size_t {d.cname} = (size_t)ctx->sizes[{dims.dims.index(d)}];" for d in used)
        return f"""int {name}_{fn}(const {name}_ctx *ctx, int index, int64_t *shape)
{{
    if (!ctx || !shape) return {N}_ERR_NULL_ARG;
    if (ctx->initialized != 0x70743263u) return {N}_ERR_NOT_INITIALIZED;
    {{{decl}
    switch (index) {{
{body}
    default: return {N}_ERR_INDEX;
    }}
    }}
}}
"""
    return f"""
static const {name}_size_desc sizes_desc[{N}_NUM_SIZES] = {{
{rows}
}};

int {name}_num_sizes(void) {{ return {N}_NUM_SIZES; }}
const {name}_size_desc *{name}_sizes(void) {{ return sizes_desc; }}

int {name}_set_sizes({name}_ctx *ctx, const int64_t *sizes)
{{
    int i;
    if (!ctx || !sizes) return {N}_ERR_NULL_ARG;
    if (ctx->initialized != 0x70743263u) return {N}_ERR_NOT_INITIALIZED;
    for (i = 0; i < {N}_NUM_SIZES; i++)
        if (sizes[i] < sizes_desc[i].min || sizes[i] > sizes_desc[i].max) return {N}_ERR_SIZE;
    for (i = 0; i < {N}_NUM_SIZES; i++) ctx->sizes[i] = sizes[i];
    return {N}_OK;
}}

{shapes("input_shape", g.inputs)}
{shapes("output_shape", g.outputs)}"""
