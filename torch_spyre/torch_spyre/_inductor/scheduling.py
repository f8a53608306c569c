"""Inductor scheduling of the spyre device: Inductor decides what fuses; each fused kernel's
loop-level IR (its nodes' LoopBody) is traced into a flat program of ops, from which

- a kernel description (libspyre's text form, Documentation/torch_compile.md) when every op,
  type and index is one the generator takes: one ``spyre_op_fused`` launch, and
- always, an eager form: the same ops as aten ops on spyre tensors (views for the loads and
  stores), run when there is no description or the library refuses a call.

Fusion keeps a node whose kernel has no description apart from groups that have one
(``SpyreScheduling._keeps_programs``), so only that node runs its eager form, when that saves
launches.

The wrapper defines one ``SpyreKernel`` (runtime.py) per kernel and calls it with the buffers.
"""

import sympy
import torch
import torch._guards
from torch._inductor.codegen.common import BackendFeature
from torch._inductor.codegen.wrapper import pexpr
from torch._inductor.scheduler import BaseScheduling
from torch._inductor.utils import sympy_product
from torch._inductor.virtualized import V
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from .labels import origin_label

# Inductor op -> description op
UNARY = {"neg": "neg", "abs": "abs", "relu": "relu", "exp": "exp", "log": "log", "sqrt": "sqrt",
         "rsqrt": "rsqrt", "reciprocal": "recip", "tanh": "tanh", "sigmoid": "sigmoid",
         "sin": "sin", "cos": "cos"}
# the engine's VUN FLOOR..ATANH (Inductor's op names are the description's)
UNARY.update({n: n for n in ("floor", "ceil", "trunc", "round", "sign", "erf", "erfc", "log1p",
                             "expm1", "exp2", "log2", "log10", "tan", "asin", "acos", "atan",
                             "sinh", "cosh", "asinh", "acosh", "atanh")})
BINARY = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "div": "div",
          "maximum": "max", "minimum": "min", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le",
          "gt": "gt", "ge": "ge"}
REDUCTIONS = {"sum": "rsum", "max": "rmax", "min": "rmin"}
# the first index of the row's extreme (NaN first, as torch), stored as an int64 row output
ARG_REDUCTIONS = {"argmax": "rargmax", "argmin": "rargmin"}
# whether any of the row is nonzero, stored as a bool row output
BOOL_REDUCTIONS = {"any": "rany"}
COMPARES = {"eq", "ne", "lt", "le", "gt", "ge"}
# ops made of compares (0/1 results) -> operands; how the binary ones combine (x != 0) of theirs
MASK_OPS = {"isnan": 1, "isinf": 1, "logical_not": 1, "logical_and": 2, "logical_or": 2,
            "logical_xor": 2, "bitwise_not": 1, "bitwise_and": 2, "bitwise_or": 2,
            "bitwise_xor": 2}
MASK_OPS_BINARY = {"logical_and": "mul", "logical_or": "max", "logical_xor": "ne"}
INTEGERS = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}
COLS = "@COLS@"  # a row kernel's row length, filled in at the call when it is symbolic
TYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
# flat kernels' integer operands: exact values (VINT on I32 or I64), bool as 0/1 bytes
INT_TYPES = {torch.int64: "i64", torch.int32: "i32", torch.uint8: "u8", torch.bool: "bool"}
ALL_TYPES = {**TYPES, **INT_TYPES}
# integer-only ops (Python's // and %, the bitwise ops and shifts: exact)
INT_BINARY = {"floordiv": "floordiv", "remainder": "remainder", "bitwise_left_shift": "shl",
              "bitwise_right_shift": "shr"}
# the bitwise ops of integers (of masks they are the logical ones, MASK_OPS)
INT_BITWISE = {"bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor",
               "bitwise_not": "not"}
MAX_ARGS = 16  # launch arguments of a program


class Unsupported(Exception):
    pass


class Value:
    """A traced value: the index of the op that made it."""

    def __init__(self, trace, i):
        self.trace, self.i = trace, i

    def __repr__(self):
        return f"%{self.i}"


def _view(index, vars_):
    """How a load or store indexes its buffer over the iteration space: ("affine", offset,
    strides) for an affine index (a strided view), else ("expr", python expression)."""
    index = sympy.expand(index)
    if any(str(x).startswith("indirect") for x in index.free_symbols):
        return ("expr", pexpr(index))  # positions that depend on the kernel's values
    zero = {v: 0 for v in vars_}
    off = index.subs(zero)
    strides = [index.subs({**zero, v: 1}) - off for v in vars_]
    rest = sympy.expand(index - off - sum(s * v for s, v in zip(strides, vars_)))
    if rest == 0 and not any(sympy.sympify(s).free_symbols & set(vars_) for s in strides):
        return ("affine", pexpr(off), [pexpr(s) for s in strides])
    return ("expr", pexpr(index))


class Trace:
    """An ops handler recording a kernel's ops (V.ops while its nodes' bodies run)."""

    def __init__(self, vars_, rvars, real=None):
        self.vars, self.rvars = list(vars_), list(rvars)
        # a buffer that mutates another (MutationLayout, an in-place op's result) -> the
        # buffer its store writes: forwarding and load caching go by the memory written, so a
        # load of an input after a store of its mutation sees the stored value (an optimizer's
        # exp_avg.lerp_() read by its addcdiv_)
        self.real = real or {}
        self.masked_depth = 0  # inside ops.masked's body: loads may fall outside the buffer
        self.n_indirect = 0
        self.ops = []  # (kind, ...) with Value operands
        self.loads = {}  # buffer -> [index, ...]
        self.stored = {}  # (real buffer, index) -> Value: stores forward to later loads
        self.loaded = {}  # (real buffer, index) -> Value: one load each
        self.stores = []  # buffer names in order

    def _emit(self, *op):
        self.ops.append(op)
        return Value(self, len(self.ops) - 1)

    def load(self, name, index):
        key = (self.real.get(name, name), index)
        if key in self.stored:
            return self.stored[key]
        if key not in self.loaded:
            self.loads.setdefault(name, []).append(index)
            self.loaded[key] = self._emit("load", name, index, self.masked_depth > 0)
        return self.loaded[key]

    def _stored(self, name, index, value):
        written = self.real.get(name, name)
        self.stored[(written, index)] = value
        self.loaded = {k: v for k, v in self.loaded.items() if k[0] != written}
        self.stores.append(name)

    def store(self, name, index, value, mode=None):
        if mode not in (None, "atomic_add"):
            raise Unsupported(f"store mode {mode}")
        if mode is None:
            self._stored(name, index, value)
        else:  # an accumulation (a scatter_add's, index_add's): no value to forward
            self.loaded = {k: v for k, v in self.loaded.items()
                           if k[0] != self.real.get(name, name)}
            self.stores.append(name)
        self._emit("store", name, index, value, mode)

    def store_reduction(self, name, index, value):
        # the reduced value forwards to later loads of the row (pointwise epilogues)
        self._stored(name, index, value)
        self._emit("store_reduction", name, index, value)

    def reduction(self, dtype, src_dtype, reduction_type, value):
        if reduction_type == "welford_reduce":
            t = self._emit("reduction", reduction_type, value, dtype)
            return tuple(self._emit("getitem", t, k) for k in range(3))
        if reduction_type not in ("sum", "prod", "max", "min", "argmax", "argmin", "any"):
            raise Unsupported(f"reduction {reduction_type}")
        return self._emit("reduction", reduction_type, value, dtype)

    def constant(self, value, dtype):
        return self._emit("constant", value, dtype)

    def to_dtype(self, x, dtype, src_dtype=None, use_compute_types=True):
        return self._emit("to_dtype", x, dtype)

    def index_expr(self, expr, dtype):
        return self._emit("index_expr", expr, dtype)

    def indirect_indexing(self, var, size, check=True, wrap_neg=True):
        # an index computed in the kernel (a gather's, an upsample's): a symbol the eager form
        # binds to the value's tensor; the kernel description refuses it
        sym = sympy.Symbol(f"indirect{self.n_indirect}", integer=True)
        self.n_indirect += 1
        self._emit("indirect", var, size, wrap_neg, sym.name)
        return sym

    def masked(self, mask, body, other):
        # a padding's or a pooling window's loads: the body's loads may fall outside their
        # buffer where the mask is false (the eager form clamps their positions), and the
        # result is `other` there
        self.masked_depth += 1
        try:
            value = body()
        finally:
            self.masked_depth -= 1
        return self._emit("masked", mask, value, other)

    def __getattr__(self, name):
        if name.startswith("_") or name in ("bucketize", "scan", "sort", "check_bounds"):
            raise Unsupported(f"op {name}")

        def op(*args, **kwargs):
            if kwargs:
                raise Unsupported(f"op {name} with keywords")
            return self._emit("op", name, args)

        return op


STICK = 128  # bytes: the DMA's unit, where every row a program moves starts


def _split_divisions(index, vars_, sizes):
    """The index with each loop variable divided in it (``i1 // 64``, ``ModularIndexing(i1, 1,
    64)``: a reshape of a permute, attention's heads) split into digits at the divisors, so it
    is affine in the digits: ``i1`` of size 768 cut at 64 is ``64 * a + b`` (sizes 12 and 64,
    row-major as ``i1``), ``i1 // 64`` is ``a`` and ``ModularIndexing(i1, 1, 64)`` is ``b``.
    Returns (index, vars, sizes); unchanged when nothing divides a variable or when the cuts
    do not nest (each divides the next and the variable's static size)."""
    cuts = {v: set() for v in vars_}
    for e in index.atoms(FloorDiv, ModularIndexing):
        v, d = e.args[0], e.args[1]
        if v not in cuts or not d.is_Integer or (len(e.args) > 2 and not e.args[2].is_Integer):
            return index, vars_, sizes
        cuts[v] |= {int(d), int(d) * int(e.args[2])} if len(e.args) > 2 else {int(d)}
    if not any(cuts.values()):
        return index, vars_, sizes
    out_vars, out_sizes, repl = [], [], {}
    for v, size in zip(vars_, sizes):
        if not cuts[v]:
            out_vars.append(v), out_sizes.append(size)
            continue
        if not sympy.sympify(size).is_Integer:
            return index, vars_, sizes
        size = int(size)
        bounds = sorted({1, size} | {min(c, size) for c in cuts[v]})  # v // c is 0 for c >= size
        if any(b % a for a, b in zip(bounds, bounds[1:])):
            return index, vars_, sizes
        digits = [(sympy.Symbol(f"{v}_{k}", integer=True, nonnegative=True), a, b // a)
                  for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]  # (digit, weight, size)
        for t, _, n in reversed(digits):  # the outermost digit first
            out_vars.append(t), out_sizes.append(n)
        for e in index.atoms(FloorDiv, ModularIndexing):
            if e.args[0] != v:
                continue
            lo = min(int(e.args[1]), size)
            hi = min(lo * int(e.args[2]), size) if len(e.args) > 2 else size
            repl[e] = sum((t * (w // lo) for t, w, _ in digits if lo <= w < hi), sympy.S.Zero)
        repl[v] = sum(t * w for t, w, _ in digits)
    # the divisions first (their argument is the variable itself), then the variable's own terms
    index = sympy.expand(index.xreplace({e: r for e, r in repl.items() if e not in vars_}))
    return sympy.expand(index.xreplace({v: r for v, r in repl.items() if v in vars_})), \
        out_vars, out_sizes


def _strided_view(name, index, trace, slot, output=False):
    """The description's "view <offset> <size>:<stride> ..." of an operand indexed by an affine
    index that is not the position, or raises Unsupported: the position's element is offset +
    sum_k i_k * stride_k (a row kernel's positions: its rows, then its columns). The library
    moves it as rows (the last dim after merging runs) of whole sticks, or an input as
    transposed dense blocks, so the other layouts are refused here as they are in
    parse_fused; in a row kernel each row or block must be whole rows of the kernel."""
    what = f"{name}'s index {index}"
    index, vars_, sizes = _split_divisions(sympy.sympify(index), trace.vars + trace.rvars,
                                           trace.sizes + trace.rsizes)
    view = _view(index, vars_)
    nums = [view[1], *view[2]] if view[0] == "affine" else []
    sizes = [sympy.sympify(s) for s in sizes]
    if not nums or not all(sympy.sympify(x).is_Integer for x in nums[1:] + sizes):
        raise Unsupported(f"{what} is not affine with static strides")
    # a symbolic part of the offset (a slice at a dynamic position: a KV cache's write) moves
    # into the call's operand (SpyreKernel starts the tensor there); the library checks that
    # it starts on a stick
    off, moved = sympy.sympify(nums[0]).as_coeff_Add()
    if not off.is_Integer:
        off, moved = 0, sympy.sympify(nums[0])
    if moved != 0:
        trace.moved[slot] = pexpr(moved)
    off, strides = int(off), [int(sympy.sympify(x)) for x in nums[1:]]
    if off < 0 or min(strides, default=0) < 0:
        raise Unsupported(f"{what} steps backwards")
    dims = []  # normalized as parse_fused does: size-1 dims dropped, runs merged
    for size, stride in zip(map(int, sizes), strides):
        if size == 1:
            continue
        if dims and dims[-1][1] == stride * size:
            dims[-1] = (dims[-1][0] * size, stride)
        else:
            dims.append((size, stride))
    dims = dims or [(1, 1)]
    es = trace.dtypes[name].itemsize
    view = f"view {off} " + " ".join(f"{size}:{stride}" for size, stride in dims)
    if (not output and len(dims) >= 2 and dims[-2][1] == 1 and dims[-1][1] == dims[-2][0]):
        # a transposed block (x.t()): loaded whole, then transposed in the scratchpad
        if off * es % STICK or any(t * es % STICK for _, t in dims[:-2]):
            raise Unsupported(f"{what} is a transposed block off a stick")
        if trace.rvars and dims[-1][0] * dims[-2][0] % int(sympy_product(trace.rsizes)):
            raise Unsupported(f"{what} is in blocks that are not whole rows")
        return view
    if dims[-1][1] != 1:
        raise Unsupported(f"{what} is transposed (its last dim is not contiguous)")
    if dims[-1][0] * es % STICK or off * es % STICK or any(t * es % STICK for _, t in dims[:-1]):
        raise Unsupported(f"{what} is not in rows of whole sticks")
    if output and any(t == 0 for _, t in dims):
        raise Unsupported(f"{what} stores to one element from several positions")
    cols = int(sympy_product(trace.rsizes)) if trace.rvars else 0
    if cols and dims[-1][0] % cols and cols % dims[-1][0]:
        # (a row of the kernel may be several rows of the view: BatchNorm's sums per channel
        # over N and HW of NCHW, a row of N runs of HW)
        raise Unsupported(f"{what} is in rows that are not whole rows of the kernel")
    return view


def _broadcast_rows(trace):
    """A flat kernel with an input broadcast along its contiguous dim (a per-row or
    per-channel value: RMSNorm's backward's [rows, 1] scale, BatchNorm's per-channel mean over
    NCHW) as a row kernel without reductions, or None: the rows are the variables such an input
    varies with (in order), the columns the others, so the input is a ``row`` operand (one value
    per row, which the program broadcasts over the row's columns as a COL operand) and the
    operands read by position become views of whole runs of each row (NCHW by channel: a row
    of N runs of HW)."""
    if trace.rvars or not all(sympy.sympify(s).is_Integer for s in trace.sizes):
        return None
    sizes = dict(zip(trace.vars, map(int, trace.sizes)))
    row_vars = set()
    for indices in trace.loads.values():
        for index in indices:
            view = _view(index, trace.vars)
            if view[0] != "affine" or not all(sympy.sympify(x).is_Integer for x in view[2]):
                continue
            dims = [(v, int(sympy.sympify(t))) for v, t in zip(trace.vars, view[2])
                    if sizes[v] > 1]
            if dims and dims[-1][1] == 0 and any(t for _, t in dims):
                row_vars |= {v for v, t in dims if t}
    if not row_vars:
        return None
    rows = object.__new__(Trace)  # a copy (copy.copy would ask Trace.__getattr__)
    rows.__dict__.update(trace.__dict__)
    rows.vars = [v for v in trace.vars if v in row_vars]
    rows.rvars = [v for v in trace.vars if v not in row_vars]
    if not any(sizes[v] > 1 for v in rows.rvars):
        return None
    rows.sizes = [sizes[v] for v in rows.vars]
    rows.rsizes = [sizes[v] for v in rows.rvars]
    return rows


def _flat(vars_, sizes):
    return sum(v * sympy_product(sizes[k + 1:]) for k, v in enumerate(vars_))


def describe(trace, inputs, outputs):
    """The kernel description of a traced kernel, or raises Unsupported. A kernel with
    reduction variables is a row kernel: rows of the reduction's positions, the reduction over
    the innermost (contiguous) positions of the row."""
    try:
        return _describe(trace, inputs, outputs)
    except Unsupported as e:
        # a float value cast to an integer type in a kernel of floats (`x.long().float()`):
        # the kernel again with exact integer values (second, so that the kernels taken before
        # keep their descriptions)
        if str(e) not in ("cast to torch.int64", "cast to torch.int32"):
            raise
    return _describe(trace, inputs, outputs, typed=True)


INDEX_LIMIT = 2 ** 24  # fp32 holds every integer up to here exactly


def _row_index_expr(trace, expr, dtype, typed, slot_of, n_outputs, new):
    """A row kernel's index_expr (a causal mask's two aranges, positions as values): an affine
    expression with integer coefficients and constant term, as fp32 values, exact below 2^24
    (checked here, or for symbolic sizes at each call: ``trace.index_limits``).
    Its part in the column variables is the generator's iota (the column index) times a
    coefficient when it is a multiple of the flat column index, else an ``in f32 col``
    operand; its part in the row variables an ``in f32 row`` operand: the values of the part
    over the rows (or columns), which the call makes once per kernel and size
    (``SpyreKernel._index_values``; the slot's name
    ``#<kind>;<expr>;<variables>;<sizes>;<dtype>`` says how). One operand holding the whole
    value holds it in a float dtype rounded (a column operand alone: no op of column values
    only); else a float dtype rounds the sum once (a cast). An integer dtype in a kernel of
    integer values (``typed``) is the exact integer of it, made a full value first (integer
    ops of per-row values are not taken); elsewhere integers are fp32 values, as constants
    are there."""
    expr = sympy.expand(sympy.sympify(expr))
    if not (dtype in (torch.int32, torch.int64) or dtype in TYPES):
        raise Unsupported(f"index_expr of {dtype}")
    sizes = dict(zip(trace.vars + trace.rvars, map(sympy.sympify, trace.sizes + trace.rsizes)))
    coeffs = {v: expr.coeff(v) for v in sizes}
    c = sympy.expand(expr - sum(a * v for v, a in coeffs.items()))
    # the constant term may be a symbol of the call (a decode step's position): an fp32
    # scalar input the call fills with its value (SpyreKernel._symbol), added on the card
    symbolic = not c.is_Integer and not c.free_symbols & set(sizes)
    if not ((c.is_Integer or symbolic) and
            all(sympy.sympify(a).is_Integer for a in coeffs.values())):
        raise Unsupported(f"index_expr {expr} (not affine)")
    if symbolic and typed and dtype == torch.int64 and all(
            coeffs[v] == 0 or sizes[v] == 1 for v in sizes):
        # the position alone in a kernel of integer values: the exact int64 scalar (a flat
        # kernel's "@<expr>"), no fp32 bound
        name = f"@{pexpr(c)}"
        if name not in slot_of:
            slot_of[name] = len(trace.slots)
            trace.slots.append((name, "scalar"))
            trace.dtypes[name] = torch.int64
            if len(trace.slots) + n_outputs > MAX_ARGS:
                raise Unsupported("too many operands")
        return new(f"load {slot_of[name]}")
    # the largest |value|: below 2^24 here, or (symbolic sizes or constant term) checked at
    # each call
    bound = sympy.expand(sum(abs(int(a)) * (sizes[v] - 1) for v, a in coeffs.items()
                             if a != 0) + (sympy.Abs(c) if symbolic else abs(int(c))))
    if bound.is_Integer:
        if bound >= INDEX_LIMIT:
            raise Unsupported(f"index_expr {expr} (values beyond 2^24)")
    else:
        trace.index_limits.add(pexpr(bound))

    def operand(kind, vars_, const=0, otype=torch.float32):
        part = sum(coeffs[v] * v for v in vars_) + const
        name = f"#{kind};{pexpr(part)};{','.join(map(str, vars_))};" \
               f"{'|'.join(pexpr(sizes[v]) for v in vars_)};{str(otype)[6:]}"
        if name not in slot_of:
            slot_of[name] = len(trace.slots)
            trace.slots.append((name, kind))
            trace.dtypes[name] = otype
            if len(trace.slots) + n_outputs > MAX_ARGS:
                raise Unsupported("too many operands")
        return new(f"load {slot_of[name]}")

    row_used = any(coeffs[v] != 0 and sizes[v] != 1 for v in trace.vars)
    used = [v for v in trace.rvars if coeffs[v] != 0 and sizes[v] != 1]
    iota_a = None  # the column part as a * (the column index)
    if used:
        strides = {v: sympy.sympify(sympy_product(trace.rsizes[k + 1:]))
                   for k, v in enumerate(trace.rvars)}
        a = sympy.simplify(coeffs[used[-1]] / strides[used[-1]])
        if a.is_Integer and all(sympy.expand(coeffs[v] - a * strides[v]) == 0 or sizes[v] == 1
                                for v in trace.rvars):
            iota_a = int(a)
    if row_used != bool(used) and iota_a is None and not symbolic:
        # one operand holds the whole value, of the dtype when a float one (rounded once on
        # the host, as a cast would): no op of column values only
        v = operand("row" if row_used else "col", trace.vars if row_used else trace.rvars, c,
                    dtype if dtype in TYPES else torch.float32)
        if dtype in TYPES:
            return v
    else:
        parts = []
        if row_used:
            parts.append(operand("row", trace.vars))
        if used and iota_a is not None:
            col = new("iota")  # the column index
            if iota_a != 1:
                col = new(f"mul {col} {new(f'const {float(iota_a)!r}')}")
            parts.append(col)
        elif used:
            parts.append(operand("col", trace.rvars))
        if symbolic:
            # alone, in the dtype when a float one (rounded once on the host: the cast takes
            # no scalar input); else fp32, the sum rounded once by the cast below
            otype = dtype if not parts and dtype in TYPES else torch.float32
            name = f"@{str(otype)[6:]}:{pexpr(c)}"
            if name not in slot_of:
                slot_of[name] = len(trace.slots)
                trace.slots.append((name, "scalar"))
                trace.dtypes[name] = otype
                if len(trace.slots) + n_outputs > MAX_ARGS:
                    raise Unsupported("too many operands")
            parts.append(new(f"load {slot_of[name]}"))
            if len(parts) == 1 and dtype in TYPES:
                return parts[0]
        elif c != 0 or not parts:
            parts.append(new(f"const {float(c)!r}"))
        v = parts[0]
        for p in parts[1:]:
            v = new(f"add {v} {p}")
        if dtype in TYPES:
            return new(f"cast {v} {TYPES[dtype]}")
    if typed:
        if not used or iota_a is None:  # a per-row or per-column value: made full first
            # (integer ops of per-row values are not taken), 0 * iota + v
            zeros = new(f"mul {new('iota')} {new('const 0.0')}")
            v = new(f"add {zeros} {v}")
        return new(f"cast {v} {INT_TYPES[dtype]}")
    return v


def _describe(trace, inputs, outputs, typed=None):
    if len(inputs) + len(outputs) > MAX_ARGS:
        raise Unsupported("too many buffers")
    trace.slots = []  # the description's inputs: a buffer once, or once per index it is read at
    trace.index_limits = set()  # a row kernel's index values' largest |value| (symbolic sizes)
    trace.moved = {}  # description argument -> the symbolic offset of its view, for the call
    sizes, rsizes = trace.sizes, trace.rsizes
    rows = bool(trace.rvars)
    row_index = _flat(trace.vars, sizes)
    col_index = _flat(trace.rvars, rsizes)
    cols = sympy_product(rsizes)
    contiguous = row_index * cols + col_index if rows else row_index

    def same(i, j):
        return sympy.expand(i - j) == 0

    kinds, lines, ids = {}, [], {}
    slot_of = {}  # (buffer, index) -> its input of the description
    arg_values = set()  # values of arg reductions: stored to int64 row outputs only
    bool_values = set()  # values of any: stored to bool row outputs only
    masks = set()  # values that are 0 or 1 (compares): integer and bool casts keep them
    ints = set()  # integer values: exact in the description
    int_reduced = set()  # sums, maxima and minima of integer values: int64 row outputs
    # integer constants and casts are the description's integer values in kernels that read
    # an integer buffer (or store one, flat kernels); elsewhere they stay fp32, as before
    if typed is None:
        typed = any(trace.dtypes[b] in INT_TYPES for b in trace.loads) or (
            not rows and (any(trace.dtypes[b] in INT_TYPES for b in outputs) or
                          any(op[0] == "index_expr" for op in trace.ops)))
    out_types = {}
    for name, indices in trace.loads.items():
        for kind, want in (("full", contiguous), ("scalar", 0), ("row", row_index),
                           ("col", col_index)):
            if (rows or kind in ("full", "scalar")) and all(same(i, want) for i in indices):
                kinds[name] = kind
                slot_of.update({(name, i): len(trace.slots) for i in indices})
                trace.slots.append((name, kind))
                break
        else:
            if rows and not sympy.sympify(cols).is_Integer:
                raise Unsupported(f"load of {name} is not by position, row or column")
            kinds[name] = "view"
            for i in dict.fromkeys(indices):  # each place (rotary's halves) an operand
                slot_of[(name, i)] = len(trace.slots)
                trace.slots.append((name, _strided_view(name, i, trace, len(trace.slots))))
    if len(trace.slots) + len(outputs) > MAX_ARGS:
        raise Unsupported("too many operands")
    for name in outputs:
        if name in trace.loads and kinds[name] != "full":
            raise Unsupported("an output read elsewhere")
    out_kinds = {}
    out_views = {}  # outputs of a flat kernel stored through a view

    def val(v):
        if isinstance(v, Value):
            return ids[v.i]
        raise Unsupported(f"operand {v!r}")

    def out(i, text):
        ids[i] = f"%{len(ids)}"
        lines.append(f"{ids[i]} = {text}")

    def new(text):  # a value of its own (no traced op)
        k = f"%{len(ids)}"
        ids[("x", len(ids))] = k
        lines.append(f"{k} = {text}")
        return k

    cols_text = str(int(cols)) if sympy.sympify(cols).is_Integer else COLS
    index_values = {}  # a row kernel's index_expr -> its value
    for i, op in enumerate(trace.ops):
        kind = op[0]
        if kind == "load":
            name = op[1]
            dtype = trace.dtypes[name]
            if dtype not in ALL_TYPES:
                raise Unsupported(f"{name} is {dtype}")
            out(i, f"load {slot_of[(name, op[2])]}")
            if dtype in INT_TYPES:
                ints.add(i)
                if dtype == torch.bool:
                    masks.add(i)
        elif kind in ("store", "store_reduction"):
            name, index, v = op[1:4]
            if kind == "store" and op[4] is not None:
                raise Unsupported(f"store mode {op[4]}")
            if name not in outputs:
                continue  # a buffer only this kernel used
            want, okind = ((contiguous, "full") if kind == "store" or not rows else
                           (row_index, "row"))
            index_store = okind == "row" and isinstance(v, Value) and (
                v.i in arg_values or v.i in int_reduced)
            bool_store = okind == "row" and isinstance(v, Value) and v.i in bool_values
            dtype = trace.dtypes[name]
            if rows and (index_store != (dtype == torch.int64) or
                         bool_store != (dtype == torch.bool)):
                raise Unsupported(f"store to {name}")
            if dtype not in (TYPES if rows else ALL_TYPES) and not index_store and not bool_store:
                raise Unsupported(f"store to {name}")
            if not rows and dtype == torch.bool and not (isinstance(v, Value) and v.i in masks):
                raise Unsupported(f"store to {name} of a value that is not 0 or 1")
            if not same(index, want):
                if okind == "row" or name in trace.loads:  # read and written: could overlap
                    raise Unsupported(f"store to {name} is not by position")
                out_views[name] = _strided_view(name, index, trace,
                                                len(trace.slots) + outputs.index(name), output=True)
            out_types[name] = ("i64" if index_store else "bool" if bool_store else
                               ALL_TYPES[dtype])
            if out_kinds.setdefault(name, okind) != okind:
                raise Unsupported(f"{name} stored by position and by row")
            lines.append(f"store {outputs.index(name)} {val(v)}")
        elif kind == "reduction":
            rtype, v = op[1], op[2]
            if not rows:
                raise Unsupported("reduction")
            if rtype in REDUCTIONS:
                out(i, f"{REDUCTIONS[rtype]} {val(v)}")
                # exact: VRED into I64 of integers; a count of a float mask in fp32 (exact
                # below 2^24), converted when stored
                if isinstance(v, Value) and v.i in ints and (typed or (
                        sympy.sympify(cols).is_Integer and int(cols) <= 2 ** 24)):
                    int_reduced.add(i)
            elif rtype in ARG_REDUCTIONS:
                out(i, f"{ARG_REDUCTIONS[rtype]} {val(v)}")
                arg_values.add(i)
            elif rtype in BOOL_REDUCTIONS:
                out(i, f"{BOOL_REDUCTIONS[rtype]} {val(v)}")
                bool_values.add(i)
            elif rtype == "welford_reduce":
                # mean, the sum of squared deviations and the count, in two passes over the
                # row (the row is in the scratchpad): sum, then the deviations from the mean
                x = val(v)
                n = new(f"const {cols_text}")
                mean = new(f"div {new(f'rsum {x}')} {n}")
                d = new(f"sub {x} {mean}")
                m2 = new(f"rsum {new(f'mul {d} {d}')}")
                ids[i] = (mean, m2, n)
            else:
                raise Unsupported(f"reduction {rtype}")
        elif kind == "getitem":
            ids[i] = ids[op[1].i][op[2]]
        elif kind == "index_expr" and rows:
            key = (str(op[1]), op[2])  # each node of the kernel traces its own (one value)
            if key not in index_values:
                index_values[key] = _row_index_expr(trace, op[1], op[2], typed, slot_of,
                                                    len(outputs), new)
            ids[i] = index_values[key]
            if op[2] not in TYPES and typed:
                ints.add(i)
        elif kind == "index_expr":
            # a flat kernel's positions as values (arange, position ids): sum_k c_k * i_k + c
            # with integer c_k and c over static sizes, each loop variable i_k taken from the
            # position (iota, an exact int32) as (p // stride_k) % size_k; exact integers,
            # converted once for a float dtype
            expr, dtype = sympy.expand(sympy.sympify(op[1])), op[2]
            if rows or not (dtype in (torch.int32, torch.int64) or dtype in TYPES):
                raise Unsupported(f"index_expr of {dtype}")
            coeffs = [expr.coeff(v) for v in trace.vars]
            c = sympy.expand(expr - sum(a * v for a, v in zip(coeffs, trace.vars)))
            sizes_ = [sympy.sympify(n) for n in trace.sizes]
            used = [k for k, a in enumerate(coeffs) if a != 0 and sizes_[k] != 1]
            # a variable's position digit needs the static sizes inside it (its stride) and,
            # unless it is the outermost, its own (the remainder); the constant term may be a
            # symbol of the call (a decode step's position): a scalar input the call fills
            static = all(sizes_[j].is_Integer for k in used
                         for j in range(k + (k == 0), len(sizes_)))
            if not (all(sympy.sympify(a).is_Integer for a in coeffs) and static and
                    (c.is_Integer or not c.free_symbols & set(trace.vars + trace.rvars))):
                raise Unsupported(f"index_expr {expr} (not affine in static loops)")
            pos, v = new("iota"), None
            for k in used:
                a = coeffs[k]
                stride = int(sympy_product(sizes_[k + 1:]))
                t = pos if stride == 1 else new(f"floordiv {pos} {new(f'const {stride} i64')}")
                if k > 0:
                    t = new(f"remainder {t} {new(f'const {int(sizes_[k])} i64')}")
                if a != 1:
                    t = new(f"mul {t} {new(f'const {int(a)} i64')}")
                v = t if v is None else new(f"add {v} {t}")
            if c.is_Integer and (v is None or c != 0):
                c_id = new(f"const {int(c)} i64")
                v = c_id if v is None else new(f"add {v} {c_id}")
            elif not c.is_Integer:
                name = f"@{pexpr(c)}"  # an int64 scalar input holding c's value at the call
                if name not in slot_of:
                    slot_of[name] = len(trace.slots)
                    trace.slots.append((name, "scalar"))
                    trace.dtypes[name] = torch.int64
                    if len(trace.slots) + len(outputs) > MAX_ARGS:
                        raise Unsupported("too many operands")
                c_id = new(f"load {slot_of[name]}")
                if v is None:  # a full value (the cast takes no scalar input): 0 * position
                    v = new(f"mul {pos} {new('const 0 i64')}")
                v = new(f"add {v} {c_id}")
            v = new(f"cast {v} {ALL_TYPES[dtype] if dtype != torch.int64 else 'i64'}")
            ids[i] = v
            if dtype not in TYPES:
                ints.add(i)
        elif kind == "constant":
            value, dtype = op[1:]
            if not dtype.is_floating_point and dtype not in (torch.int32, torch.int64, torch.bool):
                raise Unsupported(f"constant of {dtype}")
            if typed and dtype in (torch.int32, torch.int64):  # exact
                bits = dtype.itemsize * 8
                if not -2 ** (bits - 1) <= int(value) < 2 ** (bits - 1):
                    raise Unsupported(f"constant {value} of {dtype}")
                out(i, f"const {int(value)} {INT_TYPES[dtype]}")
                ints.add(i)
            else:
                out(i, f"const {float(value)!r}")
        elif kind == "to_dtype":
            x, dtype = op[1:]
            if dtype in TYPES:
                out(i, f"cast {val(x)} {TYPES[dtype]}")
            elif typed and dtype in (torch.int32, torch.int64) and not (
                    rows and isinstance(x, Value) and x.i in masks):
                # exact: float -> int truncates toward zero (as torch), int -> int wraps
                out(i, f"cast {val(x)} {INT_TYPES[dtype]}")
                ints.add(i)
                if isinstance(x, Value) and x.i in masks:
                    masks.add(i)
            elif typed and dtype == torch.bool and isinstance(x, Value) and x.i in ints \
                    and x.i not in masks:
                out(i, f"ne {val(x)} {new('const 0 i64')}")
                masks.add(i)
            elif dtype in INTEGERS and isinstance(x, Value) and x.i in masks:
                ids[i] = val(x)  # 0 and 1 in every integer type (Inductor's bool -> int64 -> bool)
                masks.add(i)
                if dtype != torch.bool:
                    ints.add(i)  # (a row kernel's count of a mask: its sum, exact)
            elif dtype == torch.bool:
                out(i, f"ne {val(x)} {new('const 0.0')}")  # NaN is true, as torch's bool()
                masks.add(i)
            else:
                raise Unsupported(f"cast to {dtype}")
        elif kind == "op" and op[1] in UNARY and len(op[2]) == 1:
            x = op[2][0]
            if typed and isinstance(x, Value) and x.i in ints and op[1] not in ("neg", "abs"):
                raise Unsupported(f"op {op[1]} of integers")  # Inductor casts them first
            out(i, f"{UNARY[op[1]]} {val(x)}")
            if isinstance(x, Value) and x.i in ints:
                ints.add(i)
        elif kind == "op" and op[1] == "pow" and len(op[2]) == 2:
            # x ** y, either a value or a number (libspyre expands it, specialising constants);
            # Inductor already made small integer exponents multiplies, 0.5 sqrt, 2 ** y exp2
            a = [new(f"const {float(x)!r}") if isinstance(x, (int, float)) else val(x)
                 for x in op[2]]
            out(i, f"pow {a[0]} {a[1]}")
        elif kind == "op" and op[1] == "atan2" and len(op[2]) == 2:
            # atan2(y, x) in fp32 (libspyre expands it into atan of the quotient and the
            # fix-ups of signs, zeros and infinities, as the eager kernel composes it)
            if typed and any(isinstance(a, Value) and a.i in ints for a in op[2]):
                raise Unsupported("op atan2 of integers")  # Inductor casts them first
            a = [new(f"const {float(x)!r}") if isinstance(x, (int, float)) else val(x)
                 for x in op[2]]
            out(i, f"atan2 {a[0]} {a[1]}")
        elif kind == "op" and op[1] in BINARY and len(op[2]) == 2:
            out(i, f"{BINARY[op[1]]} {val(op[2][0])} {val(op[2][1])}")
            if op[1] in COMPARES:
                masks.add(i)
            elif op[1] not in ("truediv", "div") and all(
                    isinstance(a, Value) and a.i in ints for a in op[2]):
                ints.add(i)
        elif kind == "op" and op[1] in INT_BINARY and len(op[2]) == 2:
            if not typed or not all(isinstance(a, Value) and a.i in ints for a in op[2]):
                raise Unsupported(f"op {op[1]} of floats")
            out(i, f"{INT_BINARY[op[1]]} {val(op[2][0])} {val(op[2][1])}")
            ints.add(i)
        elif kind == "op" and op[1] in INT_BITWISE and len(op[2]) == MASK_OPS[op[1]] and \
                typed and all(isinstance(x, Value) and x.i in ints and x.i not in masks
                              for x in op[2]):
            # of integers (not 0/1 masks, which may be fp32: the logical ones below)
            out(i, f"{INT_BITWISE[op[1]]} {' '.join(val(x) for x in op[2])}")
            ints.add(i)
        elif kind == "op" and op[1] in MASK_OPS and len(op[2]) == MASK_OPS[op[1]]:
            # logical ops and NaN/inf tests as compares: 0/1 values (masks); the bitwise ops
            # only of masks (bools), where they are the logical ones
            name = op[1].replace("bitwise_", "logical_")
            if name != op[1] and not all(isinstance(x, Value) and x.i in masks for x in op[2]):
                raise Unsupported(f"op {op[1]} of integers")
            a = [val(x) for x in op[2]]
            if name == "isnan":
                out(i, f"ne {a[0]} {a[0]}")
            elif name == "isinf":
                out(i, f"eq {new(f'abs {a[0]}')} {new('const inf')}")
            elif name == "logical_not":
                out(i, f"eq {a[0]} {new('const 0.0')}")
            else:
                zero = new("const 0.0")
                nz = [new(f"ne {x} {zero}") for x in a]
                out(i, f"{MASK_OPS_BINARY[name]} {nz[0]} {nz[1]}")
            masks.add(i)
        elif kind == "op" and op[1] == "fma" and len(op[2]) == 3:
            # Inductor's fused multiply-add (its lerp and layer_norm decompositions): one
            # rounding, as the CPU's std::fma (the description's fma is one VFMA)
            if typed and any(isinstance(a, Value) and a.i in ints for a in op[2]):
                raise Unsupported("op fma of integers")
            out(i, f"fma {' '.join(val(a) for a in op[2])}")
        elif kind == "op" and op[1] == "where" and len(op[2]) == 3:
            out(i, f"where {' '.join(val(a) for a in op[2])}")
            if all(isinstance(a, Value) and a.i in ints for a in op[2][1:]):
                ints.add(i)
        else:
            raise Unsupported(f"{kind} {op[1] if len(op) > 1 else ''}")
    vars_ = trace.vars + trace.rvars
    if (out_views or "view" in kinds.values()) and all(
            _view(op[2], vars_)[0] == "affine" for op in trace.ops
            if op[0] in ("load", "store")) and all(
            op[0] == "load" or (op[0] == "store" and trace.ops[op[3].i][0] == "load" and
                                trace.dtypes[trace.ops[op[3].i][1]] == trace.dtypes[op[1]])
            for op in trace.ops):
        # a strided copy (q/k/v head transposes, a KV cache's write): the eager form's copy_ is
        # the DMA engine's strided copy, no program launch (a load through a divided index, a
        # reshape of a permute, would be a gather there: it stays one fused launch)
        raise Unsupported("a strided copy (the eager form's DMA copy)")
    head = ["spyre.kernel 1"] + ([f"rows {cols_text}"] if rows else [])
    head += [f"in {ALL_TYPES[trace.dtypes[a]]} {kind}" for a, kind in trace.slots]
    head += [f"out {out_types.get(a) or ALL_TYPES[trace.dtypes[a]]}" +
             (" row" if out_kinds.get(a) == "row" else "") +
             (f" {out_views[a]}" if a in out_views else "") for a in outputs]
    return "\n".join(head + lines) + "\n"


def _trace_nodes(nodes, scheduler):
    """The trace of a kernel of these scheduler nodes (in order) and its (inputs, outputs,
    removed buffers): a buffer stored here disappears when only these nodes use it and every
    load of it here was forwarded from its store. No side effect on the graph: the fusion
    rules trace candidate groups with it too."""
    # a row kernel's loops are its reductions' (rows, cols)
    sizes, rsizes = next((n for n in nodes if n.is_reduction()), nodes[0])._sizes
    vars_ = [sympy.Symbol(f"i{k}", integer=True, nonnegative=True) for k in range(len(sizes))]
    rvars = [sympy.Symbol(f"r{k}", integer=True, nonnegative=True) for k in range(len(rsizes))]
    trace = Trace(vars_, rvars, scheduler.mutation_real_name)
    trace.sizes, trace.rsizes = list(sizes), list(rsizes)
    with V.set_ops_handler(trace):
        for n in nodes:
            if rvars and not n.is_reduction():
                n._body(vars_ + rvars, [])  # an epilogue over [rows..., cols...]
            else:
                n._body(vars_, rvars)
    names = {n.get_name() for n in nodes}
    removed = {b for b in trace.stores if b not in trace.loads
               and scheduler.can_buffer_be_removed_through_fusion(b, names)}
    outputs = list(dict.fromkeys(b for b in trace.stores if b not in removed))
    inputs = list(trace.loads)
    trace.dtypes = {b: V.graph.get_dtype(b) for b in inputs + outputs}
    return trace, inputs, outputs, removed


def _description(trace, inputs, outputs):
    """(the kernel description, "") or (None, why the generator refuses it); the trace's
    slots, moved offsets and index limits are the description's."""
    try:
        return describe(trace, inputs, outputs), ""
    except Unsupported as e:
        why = str(e)
    rows = _broadcast_rows(trace)  # an input broadcast along the contiguous dim
    if rows is not None:
        try:
            desc = describe(rows, inputs, outputs)
        except Unsupported:
            return None, why
        trace.slots, trace.moved = rows.slots, rows.moved
        trace.index_limits = rows.index_limits
        return desc, ""
    return None, why


def _eager_ops(trace):
    """About how many aten ops (each one launch or more) the eager form of a trace runs: its
    computing ops and the gathers of its loads at positions that are not affine."""
    vars_ = trace.vars + trace.rvars
    return sum(1 for op in trace.ops
               if op[0] in ("op", "reduction", "to_dtype", "masked", "index_expr") or
               (op[0] == "load" and _view(op[2], vars_)[0] != "affine"))


def eager_form(trace, inputs, outputs):
    """The ops as data for runtime.SpyreKernel's eager path (operands: ("v", i) or ("c", x))."""
    vars_ = trace.vars + trace.rvars

    def opd(v):
        if isinstance(v, Value):
            return ("v", v.i)
        if isinstance(v, (bool, int)):
            return ("c", v)
        if isinstance(v, float):
            return ("f", repr(v))  # inf and nan as text: the spec is Python source
        raise Unsupported(f"operand {v!r}")

    prog = []
    for op in trace.ops:
        kind = op[0]
        if kind == "load":
            prog.append(("load", inputs.index(op[1]), _view(op[2], vars_), op[3]))
        elif kind in ("store", "store_reduction"):
            if op[1] not in outputs:
                prog.append(("nop",))  # a buffer only this kernel used: its loads are forwarded
                continue
            pos = len(inputs) + outputs.index(op[1])
            mode = op[4] if kind == "store" else None
            prog.append((kind, pos, _view(op[2], vars_), opd(op[3])) + ((mode,) if mode else ()))
        elif kind == "indirect":
            prog.append(("indirect", opd(op[1]), pexpr(op[2]), op[3], op[4]))
        elif kind == "masked":
            prog.append(("masked", opd(op[1]), opd(op[2]), opd(op[3])))
        elif kind == "constant":
            prog.append(("constant", repr(op[1]), str(op[2]).replace("torch.", "")))
        elif kind == "to_dtype":
            prog.append(("to_dtype", opd(op[1]), str(op[2]).replace("torch.", "")))
        elif kind == "index_expr":
            prog.append(("index_expr", pexpr(op[1]), str(op[2]).replace("torch.", "")))
        elif kind == "reduction":
            prog.append(("reduction", op[1], opd(op[2]), str(op[3]).replace("torch.", "")))
        elif kind == "getitem":
            prog.append(("getitem", opd(op[1]), op[2]))
        else:
            prog.append(("op", op[1], [opd(a) for a in op[2]]))
    return prog


def _device_type(name):
    buf = V.graph.get_buffer(name)  # graph inputs too
    d = buf.get_device() if buf is not None else None
    return d.type if d is not None else None


def _kernel_device(nodes):
    """The spyre card the nodes of a kernel run on (its index), or None."""
    for n in nodes:
        d = n.get_device()
        if d is not None and d.type == "spyre":
            return d.index if d.index is not None else 0
    return None


class SpyreScheduling(BaseScheduling):
    def __init__(self, scheduler):
        super().__init__()
        self.scheduler = scheduler
        self.count = 0
        self._described = {}  # (node name, body id), ... -> _kernel's answer

    @classmethod
    def get_backend_features(cls, device):
        # A row kernel reduces a whole row in one launch (rows too long for a core's
        # scratchpad are streamed in column chunks over all cores, the partial results
        # combined with ALLRED), so Inductor must not split a long reduction into partial
        # reductions (one launch each): this feature turns config.split_reductions off for
        # spyre (ir.Reduction.num_splits).
        return (BackendFeature.REDUCE_TO_SINGLE_ELEMENT,)

    def group_fn(self, sizes):
        return tuple(tuple(map(V.graph.sizevars.simplify, s)) for s in sizes)

    @staticmethod
    def _rows_then_pointwise(g1, g2):
        """A pointwise group over [rows..., cols...] after a reduction group over rows with the
        reduction over cols: the epilogue of a row kernel."""
        (s1, r1), (s2, r2) = g1[1], g2[1]
        return bool(r1) and not r2 and tuple(s2) == tuple(s1) + tuple(r1)

    def can_fuse_vertical(self, node1, node2):
        if len(node1.get_nodes()) + len(node2.get_nodes()) > 16:
            return False
        return ((node1.group == node2.group or
                 self._rows_then_pointwise(node1.group, node2.group) or
                 self._rows_then_pointwise(node2.group, node1.group))
                and self._keeps_programs(node1, node2))

    def can_fuse_horizontal(self, node1, node2):
        # unrelated nodes only over the same loops: a pointwise node joining a row kernel for a
        # shared read would take the row kernel to the eager form with it if it cannot lower
        return (node1.group == node2.group and
                len(node1.get_nodes()) + len(node2.get_nodes()) <= 16 and
                self._keeps_programs(node1, node2))

    def _kernel(self, nodes):
        """(whether the kernel of these nodes, in order, has a description: one fused launch,
        about how many aten ops its eager form runs otherwise, ``_eager_ops``); (None, None)
        when tracing them fails otherwise (the fusion rules then do as before). Cached by the
        nodes: Inductor asks about a group many times."""
        key = tuple((n.get_name(), id(n._body)) for n in nodes)
        if key not in self._described:
            try:
                trace, inputs, outputs, _ = _trace_nodes(nodes, self.scheduler)
                desc = _description(trace, inputs, outputs)[0]
                self._described[key] = (True, 1) if desc else (False, _eager_ops(trace))
            except Exception:  # noqa: BLE001 - codegen_node reports it, if it happens there
                self._described[key] = (None, None)
        return self._described[key]

    def _keeps_programs(self, node1, node2):
        """Whether to fuse the two groups as far as their descriptions go: a group the
        generator refuses (a prod in a row kernel, a transposed layout) is cut there instead
        of taking a group it takes to its eager form with it (nor are two described groups
        fused when their union is refused), when that saves launches: each described part one
        launch against the eager ops the union's eager form would run for it (a lone
        ``sum`` is one aten op either way, and its buffer read back may cost a gather). The
        union is asked, not only the parts: it may have a description where a part has none
        (a buffer forwarded inside it), and then always fuses."""
        union = self._kernel(node1.get_nodes() + node2.get_nodes())
        if union[0] is not False:
            return True  # (asked first: most fusions are described, the parts not traced)
        parts = [self._kernel(node1.get_nodes()), self._kernel(node2.get_nodes())]
        if any(p[0] is None for p in parts) or not any(p[0] for p in parts):
            return True  # no fused program to lose: one eager form for both
        return sum(p[1] for p in parts) >= union[1]

    def codegen_sync(self):
        pass

    def flush(self):
        pass

    def ready_to_flush(self):
        return False

    def codegen_template(self, template_node, epilogue_nodes):
        raise NotImplementedError("spyre: no templates")

    def benchmark_fused_nodes(self, nodes):
        raise NotImplementedError("spyre: no kernel benchmarking")

    def codegen_node(self, node):
        nodes = node.get_nodes()
        trace, inputs, outputs, removed = _trace_nodes(nodes, V.graph.scheduler)
        for n in nodes:
            n.mark_run()
        V.graph.removed_buffers |= removed
        real = V.graph.scheduler.mutation_real_name
        args = inputs + outputs
        vars_, rvars = trace.vars, trace.rvars
        sizes, rsizes = trace.sizes, trace.rsizes
        symbols = set()
        for e in list(sizes) + list(rsizes):
            symbols |= sympy.sympify(e).free_symbols
        for op in trace.ops:
            if op[0] in ("load", "store", "store_reduction", "index_expr", "indirect"):
                symbols |= sympy.sympify(op[2] if op[0] != "index_expr" else op[1]).free_symbols
        # the indirect indices are the kernel's own values, not the call's symbols
        symbols = sorted(str(s) for s in symbols - set(vars_) - set(rvars)
                         if not str(s).startswith("indirect"))
        desc, why = _description(trace, inputs, outputs)
        # the description's operands: each input once per slot, then the outputs
        # (a symbol's value, "@<expr>": an int64 scalar the call makes, SpyreKernel._symbol;
        # a row kernel's index values, "#...": a row or col operand it makes once,
        # SpyreKernel._index_values)
        slots = [b if b[0] in "@#" else inputs.index(b)
                 for b, _ in trace.slots] if desc else None
        spec = {
            "sizes": [pexpr(s) for s in sizes],
            "rsizes": [pexpr(s) for s in rsizes],
            "n_inputs": len(inputs),
            "kernel": desc,
            "eager": eager_form(trace, inputs, outputs),
            "names": args,
            "slots": slots if slots != list(range(len(inputs))) else None,
            "moved": trace.moved if desc else {},  # operand -> its view's symbolic offset
            # expressions of the sizes that must stay below 2^24 for the description (a row
            # kernel's index values, exact in fp32): else the call runs the eager form
            "index_limits": sorted(trace.index_limits) if desc else [],
            # inputs in host memory: CPU scalar tensors (an optimizer's step count), which
            # Inductor lets device kernels read as CUDA's kernels do
            "host": [k for k, b in enumerate(inputs) if _device_type(b) == "cpu"],
            # the card the kernel is prepared on when the graph is loaded
            "device": _kernel_device(nodes),
        }
        name = f"spyre_kernel_{self.count}"
        self.count += 1
        spec["label"] = origin_label(name, [o for n in nodes for o in
                                                 getattr(n.node, "origins", None) or ()])
        wrapper = V.graph.wrapper_code
        origin = ", ".join(n.get_name() for n in nodes)
        comment = f"# {origin}: " + ("one fused program" if desc else f"eager ops ({why})")
        wrapper.header.splice(f"\nfrom torch_spyre._inductor.runtime import SpyreKernel\n"
                              f"{comment}\n{name} = SpyreKernel({spec!r})\n")
        call_args = [real.get(a, a) for a in args] + [f"{s}={s}" for s in symbols]
        wrapper.writeline(f"{name}({', '.join(call_args)})")
