"""Symbolic sizes: a dim the export declared dynamic is a `Sym`, a small integer expression over named,
bounded dims (sympy underneath), everywhere a shape holds an int.

A Sym does the arithmetic of sizes (+, -, *, //, %) and prints as a C expression over the run's size
variables.  A comparison is answered when the dims' ranges decide it (`s0 >= 1` for s0 in [1, 64]); one
that depends on the run-time size (`s0 <= 4`, `int(s0)`, `range(s0)`) raises `DynamicSizeError`: the code
that asked makes a compile-time decision from a size, and does not support that size being dynamic.
(`==` is structural, as torch.export's guards and size-oblivious rules are: see `Sym.__eq__`.)  The
compiler then reports the node and compiles the example's sizes (with a warning), never a guess.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import Any

import sympy


class DynamicSizeError(Exception):
    """A compile-time decision asked for the value of a size that is only known at run time."""


@dataclass
class Dim:
    """One dynamic dim: the export's symbol, its C name (a run-time size variable), its range, the example's size."""

    symbol: sympy.Symbol
    cname: str
    lo: int
    hi: int
    hint: int
    input: str = ""  # the user input that has this size, at dim `dim`: scale * size + offset there
    dim: int = 0
    scale: int = 1
    offset: int = 0

    @property
    def where(self) -> str:
        derived = "" if (self.scale, self.offset) == (1, 0) else f" = {self.scale} * size" + (
            f" + {self.offset}" if self.offset else "")
        return f"input '{self.input}' dim {self.dim}{derived}"


@dataclass(eq=False)
class Dims:
    """The dynamic dims of one program (a graph's `meta["dims"]`)."""

    dims: list[Dim] = field(default_factory=list)

    def by_symbol(self) -> dict[sympy.Symbol, Dim]:
        return {d.symbol: d for d in self.dims}

    def sym(self, symbol: sympy.Symbol) -> Sym:
        return Sym(symbol, self)

    def expr(self, e: Any) -> int | Sym:
        """A sympy expression over this program's symbols as a size: an int when it is constant."""
        e = sympy.sympify(e)
        return int(e) if e.is_Integer else Sym(e, self)


@functools.lru_cache(maxsize=4096)
def _compiled(e: sympy.Expr, syms: tuple) -> Any:
    """e as a Python function of syms (sizes are far below 2**53: float floors are exact)."""
    return sympy.lambdify(syms, e, modules=[{"floor": lambda x: x // 1}, "math"])


class Sym:
    """A symbolic size (see the module doc).  Immutable; equal Syms have the same expression."""

    __slots__ = ("dims", "e")

    def __init__(self, e: sympy.Expr, dims: Dims):
        self.e = e
        self.dims = dims

    # ------------------------------------------------------------ arithmetic
    def _other(self, o: Any) -> sympy.Expr:
        if isinstance(o, Sym):
            return o.e
        if isinstance(o, bool) or not isinstance(o, int):
            try:
                import numpy as np

                if isinstance(o, np.integer):
                    return sympy.Integer(int(o))
            except ImportError:
                pass
            raise TypeError(f"size arithmetic with {type(o).__name__}")
        return sympy.Integer(o)

    def _make(self, e: sympy.Expr) -> int | Sym:
        return self.dims.expr(e)

    def __add__(self, o: Any) -> int | Sym:
        return self._make(self.e + self._other(o))

    __radd__ = __add__

    def __sub__(self, o: Any) -> int | Sym:
        return self._make(self.e - self._other(o))

    def __rsub__(self, o: Any) -> int | Sym:
        return self._make(self._other(o) - self.e)

    def __mul__(self, o: Any) -> int | Sym:
        return self._make(self.e * self._other(o))

    __rmul__ = __mul__

    def __floordiv__(self, o: Any) -> int | Sym:
        return self._make(sympy.floor(self.e / self._other(o)))

    def __rfloordiv__(self, o: Any) -> int | Sym:
        return self._make(sympy.floor(self._other(o) / self.e))

    def __mod__(self, o: Any) -> int | Sym:
        return self._make(sympy.Mod(self.e, self._other(o)))

    def __rmod__(self, o: Any) -> int | Sym:
        return self._make(sympy.Mod(self._other(o), self.e))

    def __truediv__(self, o: Any) -> Any:
        raise self._undecided("a ratio of sizes")

    __rtruediv__ = __truediv__

    def __neg__(self) -> int | Sym:
        return self._make(-self.e)

    def __pos__(self) -> Sym:
        return self

    # ------------------------------------------------------------ bounds and decisions
    def bounds(self) -> tuple[int, int]:
        """(min, max) over the dims' ranges: at the corners of the box (sums and products of sizes, and floor
        divisions of them, are monotone in each dim); an expression with a remainder at every point of a small
        box, else undecided."""
        syms = sorted(self.e.free_symbols, key=str)
        by = self.dims.by_symbol()
        if self.e.has(sympy.Mod):
            points = itertools.product(*[range(by[s].lo, by[s].hi + 1) for s in syms])
            if any(by[s].hi - by[s].lo > 4096 for s in syms) or len(syms) > 2:
                raise self._undecided("the range of a remainder")
        else:
            points = itertools.product(*[(by[s].lo, by[s].hi) for s in syms])
        f = _compiled(self.e, tuple(syms))
        vals = [int(f(*p)) for p in points]
        return min(vals), max(vals)

    @property
    def upper(self) -> int:
        return self.bounds()[1]

    @property
    def hint(self) -> int:
        by = self.dims.by_symbol()
        return int(self.e.subs({s: by[s].hint for s in self.e.free_symbols}))

    def at(self, sizes: dict[str, int]) -> int:
        """The value at given sizes (C name -> size)."""
        return int(self.e.subs({d.symbol: sizes[d.cname] for d in self.dims.dims if d.symbol in self.e.free_symbols}))

    def _undecided(self, what: str) -> DynamicSizeError:
        return DynamicSizeError(f"{what} depends on the run-time size {self}")

    def _cmp(self, o: Any, op: str) -> bool:
        d = Sym(self.e - self._other(o), self.dims)
        if d.e.is_Integer:
            v = int(d.e)
            return {"<": v < 0, "<=": v <= 0, ">": v > 0, ">=": v >= 0}[op]
        lo, hi = d.bounds()
        if op == "<" and (hi < 0 or lo >= 0):
            return hi < 0
        if op == "<=" and (hi <= 0 or lo > 0):
            return hi <= 0
        if op == ">" and (lo > 0 or hi <= 0):
            return lo > 0
        if op == ">=" and (lo >= 0 or hi < 0):
            return lo >= 0
        raise self._undecided(f"whether {self} {op} {o}")

    def __lt__(self, o: Any) -> bool:
        return self._cmp(o, "<")

    def __le__(self, o: Any) -> bool:
        return self._cmp(o, "<=")

    def __gt__(self, o: Any) -> bool:
        return self._cmp(o, ">")

    def __ge__(self, o: Any) -> bool:
        return self._cmp(o, ">=")

    def __eq__(self, o: Any) -> bool:
        """Structural: the same expression.  torch.export unified every pair of sizes the program needs equal
        (its guards), and treats a dynamic size as never 0 or 1 (size-oblivious); so two different expressions
        are different sizes, and the code a False leads to (a copy instead of a view, no dim dropped as size 1,
        an error for a shape a rule does not accept) is right, or loud, at every size."""
        if not isinstance(o, (Sym, int)) or isinstance(o, bool):
            return NotImplemented
        return sympy.expand(self.e - self._other(o)) == 0

    def __ne__(self, o: Any) -> bool:
        r = self.__eq__(o)
        return r if r is NotImplemented else not r

    def __hash__(self) -> int:
        return hash(sympy.expand(self.e))  # (equal Syms: the same expanded expression)

    def __bool__(self) -> bool:
        return self != 0

    def __int__(self) -> int:
        raise self._undecided("a static size")

    def __index__(self) -> int:
        raise self._undecided("a static size")

    def __float__(self) -> float:
        raise self._undecided("a static size")

    # ------------------------------------------------------------ printing
    def __str__(self) -> str:
        return c_expr(self.e, self.dims)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return str(self)


def c_expr(e: sympy.Expr, dims: Dims) -> str:
    """A size expression in C (size_t arithmetic over the run's size variables)."""
    names = {d.symbol: d.cname for d in dims.dims}

    def p(x: sympy.Expr, prec: int = 0) -> str:
        if x.is_Integer:
            return str(int(x))
        if x.is_Symbol:
            return names[x]
        if isinstance(x, sympy.floor):
            num, den = sympy.fraction(sympy.together(x.args[0]))
            s = f"{p(num, 2)} / {p(den, 3)}"
            return f"({s})" if prec > 1 else s
        if isinstance(x, sympy.Mod):
            s = f"{p(x.args[0], 2)} % {p(x.args[1], 3)}"
            return f"({s})" if prec > 1 else s
        if x.is_Add:
            terms = sorted(x.args, key=lambda t: (t.is_Integer, str(t)))
            s = p(terms[0], 1)
            for t in terms[1:]:
                if t.could_extract_minus_sign():
                    s += f" - {p(-t, 2)}"
                else:
                    s += f" + {p(t, 1)}"
            return f"({s})" if prec > 1 else s
        if x.is_Mul:
            coeff, rest = x.as_coeff_Mul()
            factors = ([str(int(coeff))] if coeff != 1 else []) + [p(f, 3) for f in sympy.Mul.make_args(rest)]
            s = " * ".join(factors)
            return f"({s})" if prec > 2 else s
        if x.is_Pow and x.exp.is_Integer and int(x.exp) > 0:
            return "(" + " * ".join([p(x.base, 3)] * int(x.exp)) + ")"
        raise DynamicSizeError(f"the size expression {x} has no C form pt2c writes")

    return p(e)


def is_sym(x: Any) -> bool:
    return isinstance(x, Sym)


def upper(x: Any) -> int:
    """A size's largest value: x itself when static."""
    return x.upper if isinstance(x, Sym) else int(x)


def hint(x: Any) -> int:
    return x.hint if isinstance(x, Sym) else int(x)


def prod(xs: Any) -> int | Sym:
    """The product of sizes (1 for none); symbolic when one is."""
    out: int | Sym = 1
    for x in xs:
        out = out * x
    return out


def dynamic(shape: Any) -> bool:
    return any(isinstance(s, Sym) for s in shape)


def samples(dims: Dims, limit: int = 512) -> list[dict[str, int]]:
    """Size assignments (C name -> size) that cover each dim's range: every size of a short range, else its
    ends, the example and the powers of two and their halves between; at most `limit` combinations."""
    per = []
    for d in dims.dims:
        if d.hi - d.lo <= 64:
            vals = set(range(d.lo, d.hi + 1))
        else:
            vals = {d.lo, d.hi, d.hint} | {v for k in range(40) for v in (1 << k, 3 << k) if d.lo <= v <= d.hi}
        per.append(sorted(vals))
    out = [dict(zip([d.cname for d in dims.dims], c)) for c in itertools.product(*per)]
    if len(out) > limit:
        step = len(out) / limit
        out = [out[int(i * step)] for i in range(limit)] + [out[-1]]
    return out


def at(x: Any, sizes: dict[str, int]) -> Any:
    """x (a size, or a tuple / list / dict of them) at given sizes."""
    if isinstance(x, Sym):
        return x.at(sizes)
    if isinstance(x, (tuple, list)):
        return type(x)(at(v, sizes) for v in x)
    if isinstance(x, dict):
        return {k: at(v, sizes) for k, v in x.items()}
    return x


def concrete_value(v: Any, sizes: dict[str, int]) -> Any:
    """A Value at given sizes (itself when static; a copy otherwise, which no graph holds)."""
    if not dynamic(v.shape):
        return v
    c = type(v)(v.name, at(v.shape, sizes), v.dtype, v.data)
    return c


def sint(x: Any) -> str:
    """A size for a signed C context (a `long` loop bound, an int64_t index check): a dynamic size's size_t
    expression cast to long (the sizes are far below LONG_MAX), an int as itself."""
    return f"(long)({x})" if isinstance(x, Sym) else str(x)
