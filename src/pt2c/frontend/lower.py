"""FX graph (core ATen, after decomposition) -> pt2c IR.

Nodes whose tensor inputs are all constants are evaluated with torch itself (exact PyTorch
semantics) and become constants.  Every unsupported op is collected and reported at once.
"""

from __future__ import annotations

import keyword
import os
import operator
import re
from typing import Any, NoReturn

import numpy as np

from pt2c.errors import InputError, UnsupportedError
from pt2c.ir import DTYPES, Graph, Node, Origin, Value, captured
from pt2c.ops import LOWERINGS, OPS, UNSUPPORTED
from pt2c.frontend.reduced import (REDUCED_ROUND, mark_bf16_products, round_results, storage_dtype, tensor_dtype,
                                   to_numpy, torch_dtype)
from pt2c.ops.elementwise import e_cast, e_in
from pt2c.ops.shape import make_strided, make_view
from pt2c.sym import Dim, Dims, DynamicSizeError, Sym, dynamic

# Folding: a node whose tensor inputs are all constants is evaluated at compile time, whatever the size of
# its result (standardised or normalised weights, merged LoRA updates, transposed or tied weights: computing
# them at every run would also lose the pre-packed fast paths), except where that only makes the blob bigger:
# a result made without tensor inputs (ones, arange, full) or by repeating its inputs' values (expand,
# repeat), larger than FOLD_MAX_BYTES and than its inputs, stays a run-time op.
FOLD_MAX_BYTES = 1 << 20
REPLICATING = ("expand", "repeat", "tile", "broadcast_to")
NEVER_FOLD = ("rand", "normal", "bernoulli", "dropout", "uniform", "randint", "randperm", "multinomial")

C_RESERVED = set(keyword.kwlist) | {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern",
    "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while",
    "ctx", "ws", "wb", "ep", "b", "i", "o", "k", "inputs", "outputs", "scratch", "main", "errno",
    # libc/libm functions the generated code calls (a buffer named `exp` would shadow exp())
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "pow", "sin", "cos", "tan", "asin",
    "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "floor", "ceil",
    "trunc", "round", "nearbyint", "fabs", "fmod", "abs", "memcpy", "memset", "memcmp",
}

_OP_SHORT = {"convolution": "conv", "_native_batch_norm_legit_no_training": "bn", "native_layer_norm": "ln",
             "addmm": "linear", "_softmax": "softmax", "max_pool2d_with_indices": "maxpool",
             "scaled_dot_product_attention": "attn", "hardtanh": "relu6", "_to_copy": "cast",
             "_adaptive_avg_pool2d": "avgpool", "mean": "mean", "embedding": "embed"}


def c_name(s: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", s).strip("_")
    s = re.sub(r"_+", "_", s) or "t"
    if s[0].isdigit():
        s = "t" + s
    if s in C_RESERVED:
        s += "_"
    return s


def _is_torch_frame(path: str) -> bool:
    """A frame of torch itself: under this process's torch, or under an installed torch on the machine
    that exported the program (its paths are recorded in the stack trace)."""
    import torch

    here = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    return path.startswith(here) or re.search(r"[/\\](site|dist)-packages[/\\]torch[/\\]", path) is not None


def origin_of(node: Any) -> Origin:
    stack = node.meta.get("nn_module_stack") or {}
    path, mtype = "", ""
    if stack:
        path, mtype = list(stack.values())[-1]
        if not isinstance(mtype, str):
            mtype = getattr(mtype, "__qualname__", str(mtype))
        path = re.sub(r"^L\['self'\]\.?|^L__self___?", "", str(path))
        path = re.sub(r"\._modules\['([^']+)'\]", r".\1", path)
        path = re.sub(r"\[(\d+)\]", r".\1", path).strip(".")
    source = ""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in [^\n]*\n\s*([^\n]*)', trace)
    # the innermost frame outside torch: the model's own source (a transformers model's modeling_*.py
    # line, not the wrapper that called the model)
    frames = [f for f in frames if not f[0].startswith("<eval_with_key>")]  # FX's generated code (control flow)
    user = [f for f in frames if not _is_torch_frame(f[0])] or frames
    if user:
        f, line, code = user[-1]
        source = f"{f.rsplit('/', 1)[-1]}:{line}: {code.strip()}"
    return Origin(fx_name=node.name, module_path=path, module_type=str(mtype), source=source)


class LowerCtx:
    """What an op's lowering function sees: its arguments and ways to add IR (the interface the
    ops depend on is the protocol pt2c.ops.context.LowerCtx)."""

    def __init__(self, lowering: Lowering, node: Any):
        self.L = lowering
        self.node = node
        self.target = str(node.target)
        self.origin = origin_of(node)
        self._outs: list[Value] | None = None
        self.failed: str | None = None

    # outputs as declared by the FX node's metadata
    def outs(self) -> list[Value]:
        if self._outs is None:
            val = self.node.meta.get("val")
            vals = list(val) if isinstance(val, (list, tuple)) else [val]
            base = self.L.name_for(self.node, self.origin)
            self._outs = [self.L.new_value(base if i == 0 else f"{base}_{i}", self.L.shape(v.shape), torch_dtype(v.dtype))
                          if v is not None else None for i, v in enumerate(vals)]  # type: ignore[misc]
        return self._outs  # type: ignore[return-value]

    def out(self) -> Value:
        return self.outs()[0]

    def size(self, x: Any) -> Any:
        """A size from the export (an int or a SymInt) as an int or a Sym (pt2c.sym)."""
        return self.L.size(x)

    def new(self, hint: str, shape: tuple[int, ...], dtype: str) -> Value:
        return self.L.new_value(f"{self.L.name_for(self.node, self.origin)}_{hint}", shape, dtype)

    def const(self, data: np.ndarray, hint: str) -> Value:
        return self.L.const(np.ascontiguousarray(data).reshape(np.shape(data)), hint)  # keeps 0-d shape ()

    def emit(self, op: str, inputs: list[Value], attrs: dict[str, Any], outputs: list[Value]) -> Node | None:
        if any(dynamic(v.shape) for v in outputs):  # a result of run-time size is computed at run time
            n = Node(op, list(inputs), attrs, list(outputs), self.origin)
            self.L.nodes.append(n)
            return n
        if inputs and all(v.is_const for v in inputs) and not OPS[op].alias:
            res = OPS[op].ref(Node(op, inputs, attrs, list(outputs)), *[v.data for v in inputs])
            res = res if isinstance(res, (list, tuple)) else [res]
            if sum(np.asarray(r).nbytes for r in res) <= max(FOLD_MAX_BYTES, sum(v.nbytes for v in inputs)):
                for v, r in zip(outputs, res):
                    v.data = np.ascontiguousarray(np.asarray(r).astype(v.data.dtype if v.data is not None else DTYPES[v.dtype][1]))
                return None
        if inputs and all(v.is_const for v in inputs) and OPS[op].alias:
            for v in outputs:
                v.data = OPS[op].ref(Node(op, inputs, attrs, list(outputs)), *[x.data for x in inputs])
            return None
        n = Node(op, list(inputs), attrs, list(outputs), self.origin)
        self.L.nodes.append(n)
        return n

    def fail(self, why: str) -> NoReturn:
        raise _LoweringFailed(why)

    def view(self, x: Value, shape: tuple[int, ...], out: Value | None = None) -> Value:
        if x.shape == tuple(shape) and out is None:
            return x
        out = out or self.new("view", tuple(shape), x.dtype)
        if x.is_const:
            out.data = x.data.reshape(shape)
            return out
        return make_view(self, x, out)

    def transpose(self, w: Value) -> Value:
        """2-D transpose (a strided view; folded when w is a constant)."""
        if w.is_const:  # once per weight: a weight read by several nodes (ALBERT's shared layer) is one copy
            # a numpy view, not a copy: prepack packs from it, and the blob writer copies one tensor at a time, so
            # a model's linear weights are never held twice (a 1.1B Llama compiled at 2.2x its weights before)
            if id(w) not in self.L.transposed:
                self.L.transposed[id(w)] = (w, self.L.const(w.data.T, w.name + "_t"))
            return self.L.transposed[id(w)][1]
        out = self.new("t", (w.shape[1], w.shape[0]), w.dtype)
        return make_strided(self, w, out, (1, w.shape[1]), 0)


CONTROL = ("cond", "while_loop", "map_impl", "scan")  # higher-order ops lowered to control-flow nodes


class _LoweringFailed(Exception):
    pass


class Lowering:
    def __init__(self, ep: Any, name: str, kernels: dict[str, Any] | None = None, dynamic: bool = True,
                 max_sizes: tuple[tuple[str, int], ...] = ()):
        self.ep = ep
        self.max_sizes = dict(max_sizes)  # bounds for dims the export left unbounded ("input:dim" or "*")
        # the export's dynamic dims: symbolic sizes (dynamic), or compiled at the example's sizes
        self.dynamic = dynamic
        self.dims = Dims()
        self.name = name
        self.kernels = kernels or {}  # C function name -> custom.KernelSpec (users' kernels for custom ops)
        self.nodes: list[Node] = []
        self.names: set[str] = set()
        self.env: dict[str, Any] = {}  # fx node name -> Value | tuple | None
        self.problems: list[tuple[str, str, str]] = []
        self.transposed: dict[int, tuple[Value, Value]] = {}  # id(constant) -> (it, its transpose)
        self.module = ep.graph_module  # the GraphModule whose nodes are being lowered (a cond's branch ...)

    def unique(self, base: str) -> str:
        base = c_name(base)
        name, i = base, 1
        while name in self.names:
            name = f"{base}_{i}"
            i += 1
        self.names.add(name)
        return name

    # ------------------------------------------------------------ sizes
    def size(self, x: Any) -> int | Sym:
        """A size from the export (an int, or a torch SymInt / sympy expression over its symbols): a Sym over
        this program's dims, or the example's value when compiling static."""
        import torch

        if isinstance(x, torch.SymInt):
            if not self.dynamic:
                return int(x.node.hint)
            x = x.node.expr
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
            return int(x)
        if not self.dynamic:
            raise DynamicSizeError(f"the size {x}")
        return self.dims.expr(torch_sympy(x, self.dims))

    def shape(self, shape: Any) -> tuple[int | Sym, ...]:
        return tuple(self.size(s) for s in shape)

    def declare_dims(self, placeholders: list[Any]) -> None:
        """The dynamic dims of the user inputs (symbols of the export's range constraints), each named after
        the first input dim that has it; an unbounded one is refused."""
        import torch

        ranges = {str(k): v for k, v in (getattr(self.ep, "range_constraints", None) or {}).items()}
        seen: set[str] = set()
        for node in placeholders:
            val = node.meta.get("val")
            for d, n in enumerate(getattr(val, "shape", ())):
                if not isinstance(n, torch.SymInt) or not n.node.expr.is_Symbol or str(n.node.expr) in seen:
                    continue
                sym = n.node.expr
                seen.add(str(sym))
                r = ranges.get(str(sym))
                where = f"input '{node.name}' dim {d}"
                lo, hi = (int(r.lower), r.upper) if r is not None else (0, None)
                if hi is None or not str(hi).lstrip("-").isdigit():
                    hi = self.max_sizes.get(f"{node.name}:{d}", self.max_sizes.get("*"))
                    if hi is None:
                        raise InputError(
                            f"{where} is dynamic ({sym}) with no upper bound; pt2c plans memory for the largest "
                            f"sizes.\nWhat to try: bound it at export (torch.export.Dim(name, min={max(lo, 1)}, "
                            f"max=N)), or give one to pt2c (--max {node.name}:{d}=N, or --max N for every dim).")
                    if hi < max(lo, int(n.node.hint)):
                        raise InputError(f"--max {node.name}:{d}={hi} is below the example's size {n.node.hint}")
                cname = self.unique(f"{c_name(node.name)}_size{d}")
                self.dims.dims.append(Dim(sym, cname, max(lo, 1), int(hi), int(n.node.hint), node.name, d))  # (no empty tensors)
        # a dim the export derived (h = 32 * k) where no input has k itself: k read from that dim, (size - b) / a
        for node in placeholders:
            for d, n in enumerate(getattr(node.meta.get("val"), "shape", ())):
                if not isinstance(n, torch.SymInt) or len(n.node.expr.free_symbols) != 1:
                    continue
                sym = next(iter(n.node.expr.free_symbols))
                if str(sym) in seen:
                    continue
                poly = n.node.expr.as_poly(sym)
                if poly is None or poly.degree() != 1:
                    continue
                a, b = poly.all_coeffs()
                r = ranges.get(str(sym))
                if not (a.is_Integer and b.is_Integer and a > 0) or r is None or not str(r.upper).isdigit():
                    continue  # (unbounded or unknown: the expression stays undefined, and the compile static)
                seen.add(str(sym))
                cname = self.unique(f"{c_name(node.name)}_size{d}_div{int(a)}" if b == 0 else f"{c_name(node.name)}_size{d}_base")
                self.dims.dims.append(Dim(sym, cname, max(int(r.lower), 1), int(r.upper),
                                          (int(n.node.hint) - int(b)) // int(a), node.name, d, int(a), int(b)))

    def new_value(self, name: str, shape: tuple[int, ...], dtype: str) -> Value:
        return Value(self.unique(name), shape, dtype)

    def const(self, data: np.ndarray, hint: str) -> Value:
        dt = str(data.dtype) if data.dtype != np.bool_ else "bool"
        return Value(self.unique(hint), data.shape, dt, data)

    def name_for(self, node: Any, origin: Origin) -> str:
        op = str(node.target).split(".")[1] if str(node.target).startswith("aten.") else node.name
        op = _OP_SHORT.get(op, op)
        if not origin.module_path:
            return op
        mod = origin.module_type.rsplit(".", 1)[-1].lower()
        path = origin.module_path.replace(".", "_")
        return path if op in mod or mod.startswith(op) else f"{path}_{op}"

    # ------------------------------------------------------------ main loop
    def run(self) -> Graph:
        import torch

        ep = self.ep
        sig = ep.graph_signature
        state = dict(ep.state_dict)
        state.update(getattr(ep, "constants", {}) or {})
        specs = {s.arg.name: s for s in sig.input_specs}
        mutated = {s.target for s in sig.output_specs if s.kind.name == "BUFFER_MUTATION"}
        states: list[str] = []
        if self.dynamic:
            self.declare_dims([n for n in ep.graph.nodes if n.op == "placeholder"
                               and getattr(specs.get(n.name), "kind", None) is not None
                               and specs[n.name].kind.name == "USER_INPUT"])
        inputs: list[Value] = []
        for node in ep.graph.nodes:
            if node.op == "placeholder":
                spec = specs.get(node.name)
                kind = spec.kind.name if spec is not None else "USER_INPUT"
                val = node.meta.get("val")
                if kind == "USER_INPUT":
                    if not isinstance(val, torch.Tensor):
                        if val is None or type(val) in (bool, int, float, str):
                            # a Python value the export specialised (use_cache=False): a constant of the program
                            self.env[node.name] = val
                            continue
                        raise InputError(f"input '{node.name}' is a {type(val).__name__}; pt2c compiles tensor "
                                         "inputs and Python numbers, bools and strings fixed at export (a symbolic "
                                         "size needs dynamic shapes, which pt2c does not support yet)")
                    try:
                        dt = storage_dtype(val.dtype)
                    except KeyError:
                        raise InputError(f"input '{node.name}' has dtype {val.dtype}, which pt2c does not support") from None
                    v = self.new_value(node.name, self.shape(val.shape), dt)
                    inputs.append(v)
                    if dt in REDUCED_ROUND:  # computed in float32 from here on
                        f = self.new_value(f"{node.name}_f32", v.shape, "float32")
                        self.nodes.append(Node("ew", [v], {"expr": e_cast(e_in(dt, 0), "float32")}, [f], origin_of(node)))
                        v = f
                    self.env[node.name] = v
                elif kind == "BUFFER" and spec.target in mutated:
                    # a buffer the program updates: state kept in the workspace from run to run
                    init = self.const(to_numpy(state[spec.target]), spec.target + "_init")
                    v = self.new_value(spec.target, init.shape, init.dtype)
                    self.nodes.append(Node("state", [init], {"index": len(states)}, [v], origin_of(node)))
                    states.append(spec.target)
                    self.env[node.name] = v
                else:
                    self.env[node.name] = self.const(to_numpy(state[spec.target]), spec.target)  # dtypes: load.check_dtypes
            elif node.op == "call_function":
                self.env[node.name] = self.lower_node(node)
            elif node.op == "output":
                outs = [arg for arg, spec in zip(node.args[0], sig.output_specs) if spec.kind.name == "USER_OUTPUT"]
                new_state = {spec.target: arg for arg, spec in zip(node.args[0], sig.output_specs)
                             if spec.kind.name == "BUFFER_MUTATION"}
        if self.problems:
            raise UnsupportedError(self.problems)
        outputs = []
        for a in outs:
            v = self.env.get(a.name) if hasattr(a, "name") else None
            if not isinstance(v, Value):
                raise InputError(f"output {a} is not a tensor; only tensor outputs are supported")
            dt = tensor_dtype(a)
            if dt in REDUCED_ROUND:  # the model's own dtype at the C API
                r = self.new_value(f"{v.name}_{dt}", v.shape, dt)
                self.nodes.append(Node("ew", [v], {"expr": e_cast(e_in(v.dtype, 0), dt)}, [r], origin_of(a)))
                v = r
            outputs.append(v)
        if states:  # the buffers' new values: outputs until passes.finish turns them into state_write nodes
            g_state = [self.env.get(new_state[t].name) for t in states]
            if not all(isinstance(v, Value) for v in g_state):
                raise InputError("a mutated buffer's new value is not a tensor")
            outputs += g_state
        g = Graph(self.name, inputs, self.nodes, outputs)
        if states:
            g.meta["state"] = {"names": states, "outputs": len(outputs) - len(states)}
        if self.dims.dims:
            g.meta["dims"] = self.dims
        return g

    def _fold(self, node: Any) -> Any:
        """Evaluate a node whose tensor inputs are all constants with torch; None if not folded."""
        import torch

        if any(k in str(node.target) for k in NEVER_FOLD):
            return None
        tensors: list[Value] = []

        def conv(a: Any) -> Any:
            if isinstance(a, torch.fx.Node):
                v = self.env[a.name]
                if not isinstance(v, Value) or not v.is_const:
                    raise _NotConst
                tensors.append(v)
                t = torch.from_numpy(np.array(v.data))
                dt = tensor_dtype(a)
                return t.to(getattr(torch, dt)) if dt in REDUCED_ROUND else t
            if isinstance(a, (list, tuple)):
                return type(a)(conv(x) for x in a)
            return a

        try:
            args = conv(node.args)
            kwargs = {k: conv(v) for k, v in node.kwargs.items()}
        except _NotConst:
            return None
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        out_bytes = sum(v.numel() * v.element_size() for v in vals if isinstance(v, torch.Tensor))
        replicating = not tensors or any(k in str(node.target) for k in REPLICATING)
        if replicating and out_bytes > max(FOLD_MAX_BYTES, sum(v.nbytes for v in tensors)):
            return None
        try:
            with torch.no_grad():
                res = node.target(*args, **kwargs)
        except Exception:
            return None
        base = self.name_for(node, origin_of(node))

        def wrap(r: Any) -> Any:
            if isinstance(r, torch.Tensor):
                try:
                    torch_dtype(r.dtype)
                except KeyError:
                    return None
                return self.const(to_numpy(r), base)
            if isinstance(r, (list, tuple)):
                return tuple(wrap(x) for x in r)
            return None

        return wrap(res)

    def lower_node(self, node: Any) -> Any:
        import torch

        if node.target is operator.getitem:
            src = self.env[node.args[0].name]
            if isinstance(src, _Poison):
                return src
            v = src[node.args[1]] if isinstance(src, (tuple, list)) else None
            if v is None and node.users:
                self.problems.append((str(node.args[0].target), origin_of(node).describe(),
                                      f"output {node.args[1]} of this op is not supported"))
            return v
        if isinstance(node.meta.get("val"), (torch.SymInt, int)) and not isinstance(node.meta.get("val"), bool) \
                and str(node.target) not in LOWERINGS:
            return self.size(node.meta["val"])  # a size computation (sym_size, operator.mul on sizes, ...)
        if isinstance(node.target, torch._ops.HigherOrderOperator) and node.target.name() in CONTROL:
            return self.lower_control(node, origin_of(node))
        target = str(node.target)
        if isinstance(node.target, torch._ops.OpOverload) and (folded := self._fold(node)) is not None:
            return folded
        fn = LOWERINGS.get(target)
        origin = origin_of(node)
        if fn is None and getattr(node.target, "namespace", "aten") == "quantized_decomposed":
            self.problems.append((target, origin.describe(), (
                "a quantization scheme pt2c does not implement yet: it runs PT2E programs with static per-tensor and "
                "per-channel quantize / dequantize (int8, uint8).\n      What to try: a static quantization config "
                "(is_dynamic=False)")))
            return _Poison()
        if fn is None and getattr(node.target, "namespace", "aten") not in ("aten", "prims"):
            return self.lower_custom(node, origin)
        if fn is None:
            self.problems.append((target, origin.describe(), UNSUPPORTED.get(target, "")))
            return _Poison()
        try:
            args = self.normalize(node)
        except _Poisoned:
            return _Poison()
        except KeyError as e:  # a dtype argument pt2c has no C type for (complex, ...)
            self.problems.append((target, origin.describe(), f"unsupported dtype {e}"))
            return _Poison()
        ctx = LowerCtx(self, node)
        first = len(self.nodes)
        try:
            res = fn(ctx, args)
        except DynamicSizeError as e:
            raise DynamicSizeError(f"{e}: lowering {target} ({origin.describe()}) needs it static") from e
        except _LoweringFailed as e:
            self.problems.append((target, origin.describe(), str(e)))
            return _Poison()
        except KeyError as e:
            self.problems.append((target, origin.describe(), f"unsupported dtype {e}"))
            return _Poison()
        mark_bf16_products(node, self.nodes[first:])
        return round_results(node, res, origin, self.new_value, self.nodes.append)

    # ------------------------------------------------------------ control flow
    def lower_block(self, gm: Any, bindings: list[Any], name: str, own_results: bool = True) -> Graph | None:
        """A subgraph (a cond branch, a loop's cond or body) as a block: its placeholders bound to the given
        outer values, its nodes lowered into a node list of its own, its results made values the block
        defines (own_results: a copy where it returns an outer value, a constant or one value twice; not
        for a branch taken at compile time, whose nodes go in line).  None if a node failed (the problem
        is recorded)."""
        saved = (self.nodes, self.env, self.module)
        self.nodes, self.env, self.module = [], {}, gm
        try:
            phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
            for ph, v in zip(phs, bindings):
                self.env[ph.name] = v
            results: list[Any] = []
            for n in gm.graph.nodes:
                if n.op == "call_function":
                    self.env[n.name] = self.lower_node(n)
                elif n.op == "output":
                    rs = n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]
                    results = [self.env.get(a.name) if hasattr(a, "name") else a for a in rs]
            if not all(isinstance(r, Value) for r in results):
                if not any(isinstance(r, _Poison) for r in results):
                    self.problems.append((name, "a control-flow block", "returns something other than tensors"))
                return None
            inner = {id(v) for n in self.nodes for v in n.outputs}
            seen: set[int] = set()
            for i, r in enumerate(results if own_results else []):
                if id(r) not in inner or id(r) in seen or r.producer is None or OPS[r.producer.op].alias:
                    cp = self.new_value(f"{name}_result{i}", r.shape, r.dtype)
                    self.nodes.append(Node("ew", [r], {"expr": e_in(r.dtype, 0)}, [cp]))
                    results[i] = cp
                seen.add(id(results[i]))
            return Graph(name, captured(self.nodes), self.nodes, results)
        finally:
            self.nodes, self.env, self.module = saved

    def lower_control(self, node: Any, origin: Origin) -> Any:
        """torch.cond -> a cond node (or the taken branch in line when the predicate is a constant);
        while_loop -> a while_loop node; scan and map -> a scan node (map: no carry)."""
        kind = node.target.name()
        ctx = LowerCtx(self, node)
        base = self.name_for(node, origin)

        def values(args: Any) -> list[Value] | None:
            vs = [self.env.get(a.name) for a in args]
            if any(isinstance(v, _Poison) for v in vs):
                return None
            if not all(isinstance(v, Value) for v in vs):
                self.problems.append((kind, origin.describe(), "an operand is not a tensor"))
                return None
            return vs  # type: ignore[return-value]

        def module(a: Any) -> Any:
            return getattr(self.module, a.target)

        if kind == "cond":
            pred, then_gm, else_gm, operands = node.args
            p, ops = self.env.get(pred.name), values(operands)
            if ops is None or not isinstance(p, Value):
                return _Poison()
            if p.is_const:  # decided at compile time: the taken branch, in line
                blk = self.lower_block(module(then_gm if bool(np.asarray(p.data).reshape(-1)[0]) else else_gm),
                                       ops, f"{base}_branch", own_results=False)
                if blk is None:
                    return _Poison()
                self.nodes += blk.nodes
                return tuple(blk.outputs)
            blocks = [self.lower_block(module(then_gm), ops, f"{base}_then"),
                      self.lower_block(module(else_gm), ops, f"{base}_else")]
            inputs = [p]
            attrs: dict[str, Any] = {}
        elif kind == "while_loop":
            cond_gm, body_gm, carried, additional = node.args
            init, extra = values(carried), values(additional)
            if init is None or extra is None:
                return _Poison()
            inputs = list(init)
            attrs = {"n_carried": len(init)}
        else:
            if kind == "scan":
                body_gm, carried, scanned, additional = node.args[:4]
                if node.kwargs.get("reverse") or (len(node.args) > 4 and node.args[4]):
                    self.problems.append((kind, origin.describe(), "reverse scans are not supported"))
                    return _Poison()
            else:
                (body_gm, scanned, additional), carried = node.args[:3], []
            init, xs, extra = values(carried), values(scanned), values(additional)
            if init is None or xs is None or extra is None:
                return _Poison()
            if not xs or any(not x.shape or x.shape[0] != xs[0].shape[0] for x in xs):
                self.problems.append((kind, origin.describe(), "the scanned inputs must share a first dim"))
                return _Poison()
            inputs = init + xs
            attrs = {"n_carry": len(init), "n_xs": len(xs), "length": xs[0].shape[0]}
        try:
            outs = ctx.outs()
        except KeyError as e:
            self.problems.append((kind, origin.describe(), f"unsupported dtype {e}"))
            return _Poison()
        if kind == "while_loop":
            blocks = [self.lower_block(module(cond_gm), outs + extra, f"{base}_cond"),
                      self.lower_block(module(body_gm), outs + extra, f"{base}_body")]
        elif kind in ("scan", "map_impl"):
            attrs["n_ys"] = len(outs) - len(init)
            slices = [self.new_value(f"{base}_slice{i}", x.shape[1:], x.dtype) for i, x in enumerate(xs)]
            carry = outs[:len(init)]
            blocks = [self.lower_block(module(body_gm), carry + slices + extra, f"{base}_body")]
            kind = "scan"
            result = tuple(outs)
            outs = outs + slices
        if any(b is None for b in blocks):
            return _Poison()
        own = {id(v) for v in inputs + outs}
        for b in blocks:
            inputs += [v for v in b.inputs if id(v) not in own and not own.add(id(v))]  # type: ignore[func-returns-value]
        self.nodes.append(Node(kind, inputs, attrs, outs, origin, blocks=blocks))  # type: ignore[arg-type]
        return result if kind == "scan" else tuple(outs)

    def lower_custom(self, node: Any, origin: Origin) -> Any:
        """A custom op (an operator outside ATen): a custom_call of the user's C kernel for it."""
        from pt2c.custom import KernelError, TensorInfo, function_name, kernel_for, prototype, scratch_bytes
        from pt2c.ir import itemsize
        from pt2c.ops.custom import arg_entry

        op = node.target
        qual = f"{op._schema.name}.{op._overloadname}"
        schema = str(op._schema)
        target = str(node.target)
        try:
            spec = kernel_for(qual, self.kernels)
        except KernelError as e:
            self.problems.append((target, origin.describe(), str(e)))
            return _Poison()
        if spec is None:
            self.problems.append((target, origin.describe(), (
                f"custom op {schema} has no C kernel.\n      Give pt2c one: a file {function_name(qual)}.c "
                f"defining\n        {prototype(qual)}\n      in a folder passed with --kernels DIR (or "
                f"pt2c.register_kernel('{qual.removesuffix('.default')}', source=...)); see docs/custom-ops.md")))
            return _Poison()
        val = node.meta.get("val")
        reduced = sorted({d for x in [*node.all_input_nodes, node] if (d := tensor_dtype(x)) in REDUCED_ROUND}
                         | {str(v.dtype).replace("torch.", "") for v in (val if isinstance(val, (list, tuple)) else [])
                            if str(getattr(v, "dtype", "")).replace("torch.", "") in REDUCED_ROUND})
        if reduced:
            self.problems.append((target, origin.describe(), f"custom op kernels take float32, not {' / '.join(reduced)} "
                                  "tensors.\n      What to try: call the op on float32 tensors (x.float()) and convert "
                                  "its result back"))
            return _Poison()
        try:
            args = self.normalize(node)
        except _Poisoned:
            return _Poison()
        inputs: list[Value] = []
        in_map: list[int | None] = []
        call: list[list[Any]] = []
        cargs: list[list[Any]] = []
        plain: list[Any] = []
        for a in op._schema.arguments:
            if a.name not in args:
                continue
            v = args[a.name]
            if isinstance(v, Value):
                call.append([a.name, "tensor", len(inputs)])
                in_map.append(len(inputs))
                inputs.append(v)
            elif isinstance(v, list) and v and all(isinstance(x, Value) for x in v):
                call.append([a.name, "tensors", list(range(len(inputs), len(inputs) + len(v)))])
                in_map.extend(range(len(inputs), len(inputs) + len(v)))
                inputs.extend(v)
            elif v is None and "Tensor" in str(a.type):
                call.append([a.name, "tensor?", None])
                in_map.append(None)
            else:
                entry = arg_entry(v)
                if entry is None:
                    self.problems.append((target, origin.describe(), f"argument '{a.name}' ({a.type}) = {v!r} "
                                          "cannot be passed to a C kernel (numbers, bools, strings and lists of "
                                          "numbers can)"))
                    return _Poison()
                call.append([a.name, "value", entry[1]])
                cargs.append(list(entry))
                plain.append(entry[1])
        ctx = LowerCtx(self, node)
        try:
            outs = ctx.outs()
        except KeyError as e:
            self.problems.append((target, origin.describe(), f"unsupported dtype {e}"))
            return _Poison()
        if not outs or any(o is None for o in outs):
            self.problems.append((target, origin.describe(), "a custom op's results must be tensors"))
            return _Poison()
        info = [TensorInfo(v.shape, v.dtype, itemsize(v.dtype)) for v in inputs]
        oinfo = [TensorInfo(v.shape, v.dtype, itemsize(v.dtype)) for v in outs]
        try:
            scratch = scratch_bytes(spec, info, oinfo, plain)
        except KernelError as e:
            self.problems.append((target, origin.describe(), str(e)))
            return _Poison()
        attrs = {"qualname": qual, "function": spec.function, "schema": schema, "call": call, "inputs": in_map,
                 "args": cargs, "scratch": scratch, "_source": spec.source}
        self.nodes.append(Node("custom_call", inputs, attrs, list(outs), origin))
        val = node.meta.get("val")
        return tuple(outs) if isinstance(val, (list, tuple)) else outs[0]

    def normalize(self, node: Any) -> dict[str, Any]:
        """args + kwargs by schema name, defaults filled in, FX nodes replaced by Values."""
        import torch

        schema = node.target._schema
        out: dict[str, Any] = {}

        def conv(a: Any) -> Any:
            if isinstance(a, torch.fx.Node):
                v = self.env.get(a.name)
                if v is None or isinstance(v, _Poison):
                    raise _Poisoned
                return v
            if isinstance(a, (list, tuple)):
                return [conv(x) for x in a]
            if isinstance(a, torch.dtype):
                return torch_dtype(a)
            return a

        for i, arg in enumerate(schema.arguments):
            if i < len(node.args):
                out[arg.name] = conv(node.args[i])
            elif arg.name in node.kwargs:
                out[arg.name] = conv(node.kwargs[arg.name])
            elif arg.has_default_value():
                out[arg.name] = arg.default_value
        return out


class _NotConst(Exception):
    pass


class _Poisoned(Exception):
    pass


class _Poison:
    """Placeholder result of an unsupported node, so later nodes are still checked."""


def torch_sympy(e: Any, dims: Dims) -> Any:
    """A torch shape expression as plain sympy over the program's dims (torch's FloorDiv, Mod ... as sympy's)."""
    import sympy

    known = {d.symbol for d in dims.dims}
    bad = e.free_symbols - known
    if bad:
        raise DynamicSizeError(f"the size {e} uses {', '.join(map(str, sorted(bad, key=str)))}, "
                               "which no input dim defines (a data-dependent size)")

    def conv(x: Any) -> Any:
        if x.is_Atom:
            return x
        args = [conv(a) for a in x.args]
        name = type(x).__name__
        if name in ("FloorDiv", "IntTrueDiv") or (name == "CleanDiv"):
            return sympy.floor(args[0] / args[1])
        if name == "CeilDiv":
            return sympy.floor((args[0] + args[1] - 1) / args[1])
        if name in ("Mod", "PythonMod"):
            return sympy.Mod(args[0], args[1])
        if x.is_Add or x.is_Mul or x.is_Pow:
            return x.func(*args)
        raise DynamicSizeError(f"the size expression {x} ({name}) has no C form in pt2c")

    return conv(e)


def lower(ep: Any, name: str, kernels: dict[str, Any] | None = None, dynamic: bool = True,
          max_sizes: tuple[tuple[str, int], ...] = ()) -> Graph:
    return Lowering(ep, name, kernels, dynamic, max_sizes).run()
