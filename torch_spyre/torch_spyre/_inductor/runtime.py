"""What compiled spyre graphs call: one ``SpyreKernel`` per kernel Inductor generated.

A call with a kernel description is one launch of one program on the card. A kernel of static
size is prepared when the compiled graph is loaded (``torch_spyre._C._FusedKernel``: parsed,
planned, its program generated or read from the disk cache and loaded on the graph's card), so
its calls launch by handle; one whose size is symbolic is planned at its first call of each
size (``torch.ops.spyre.fused_pointwise``, the plan cache after). An input read at several places is passed once per place
(``spec["slots"]``), an operand whose view has a symbolic offset (``spec["moved"]``) starting at
that offset. Without one, or when the library refuses the call (an operand off a
stick), the kernel runs in its eager form: the traced ops as aten ops on spyre tensors, so
every op behaves as in eager mode, CPU fallbacks and ``TORCH_SPYRE_STRICT=1`` included.
``to_dtype`` converts as the fused kernel does (device-to-device conversions between the types
the cores convert exactly run on the card; the others are the copy's CPU fallback); stores
convert to the buffer's type.

Errors name the kernel (Documentation/torch_compile.md "Errors"): its label (the kernel, the
compiled graph, the FX nodes and the user's source lines) labels its launches, so a failure the
card reports later, at a synchronize, says "launched by <label>", and an exception raised
during the call gets the label as a note.
"""

import math

import torch

import torch_spyre

# per call; "copies": the eager calls that were one strided copy (SpyreKernel._copy_plan)
STATS = {"fused": 0, "eager": 0, "refused": 0, "copies": 0}
# per kernel, when its graph is loaded: prepared on the card, or refused by the library
PREPARED = {"prepared": 0, "refused": 0}

_FUNCS = {
    "truediv": torch.true_divide,
    "div": torch.true_divide,
    "floordiv": torch.floor_divide,
    "mod": torch.fmod,
    "identity": lambda x: x,
    "int_truediv": torch.true_divide,
    # Inductor's fused multiply-add (its layer_norm and lerp decompositions): the product
    # and the sum each rounded, within an ulp of the single rounding
    "fma": lambda a, b, c: a * b + c,
    # Inductor's bitwise ops on masks and integers
    "and_": lambda a, b: a & b,
    "or_": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
}

# binary torch functions without a Python number overload
_TENSORS_ONLY = {"maximum", "minimum", "atan2", "copysign", "hypot", "nextafter", "fmod",
                 "logical_and", "logical_or", "logical_xor"}


# (name, argument kinds) -> whether torch's binding of the op takes a Python number first
# (add(2, x) and pow(2, x) do, lt(2, x) and where's do not): decided before the op runs on the
# card, so an op that raises TypeError for another reason runs once. aten's schemas do not
# tell (lt has an int-int overload that Python does not take; true_divide none with a number
# first, which Python takes): one call on the host with 0-dim tensors of the arguments' dtypes.
_NUMBER_FIRST = {}


def _takes_number_first(name, fn, args):
    kinds = tuple(a.dtype if isinstance(a, torch.Tensor) else type(a) for a in args)
    ok = _NUMBER_FIRST.get((name, kinds))
    if ok is None:
        try:
            fn(*[torch.ones((), dtype=a.dtype) if isinstance(a, torch.Tensor) else a
                 for a in args])
            ok = True
        except TypeError:
            ok = False
        except Exception:  # the binding took the arguments; what failed is the values'
            ok = True
        _NUMBER_FIRST[(name, kinds)] = ok
    return ok


def _dtype(name):
    return getattr(torch, name)


def _on_card(dt):
    """The type a value of type dt is computed in on the card: the cores compute no float64,
    so a kernel's float64 intermediates (Inductor's arithmetic with a symbolic size, such as
    sum / s1) are fp32, as a fused kernel computes them, not conversions through the CPU."""
    return torch.float32 if dt == torch.float64 else dt


def _number(text, dt):
    """A constant of type dt from its repr."""
    if text in ("True", "False"):
        text = str(int(text == "True"))
    if dt.is_floating_point:
        return float(text)
    x = float(text) if any(c in text for c in ".en") else int(text)
    return bool(x) if dt == torch.bool else int(x)


def _extreme(pick, elementwise, clamp):
    def f(*args):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors:
            return pick(args)
        r = tensors[0]
        for a in tensors[1:]:
            r = elementwise(r, a)
        numbers = [a for a in args if not isinstance(a, torch.Tensor)]
        return clamp(r, pick(numbers)) if numbers else r

    return f


def _where(cond, a, b):
    """sympy's Where (a reflect pad's index with symbolic sizes), over tensors of positions."""
    if any(isinstance(v, torch.Tensor) for v in (cond, a, b)):
        return torch.where(torch.as_tensor(cond), torch.as_tensor(a), torch.as_tensor(b))
    return a if cond else b


# index expressions print Min/Max as Python's min/max: over tensors of positions, elementwise;
# Where as itself
_EVAL_GLOBALS = {
    "math": math,
    "min": _extreme(min, torch.minimum, lambda r, n: r.clamp(max=n)),
    "max": _extreme(max, torch.maximum, lambda r, n: r.clamp(min=n)),
    "Where": _where,
}


class SpyreKernel:
    def __init__(self, spec):
        self.sizes, self.rsizes = spec["sizes"], spec["rsizes"]
        self.n_inputs, self.kernel, self.prog = spec["n_inputs"], spec["kernel"], spec["eager"]
        self.names = spec["names"]
        self.slots = spec.get("slots")  # the description's inputs, when not the buffers
        self.moved = spec.get("moved") or {}
        self.index_limits = spec.get("index_limits") or ()
        self.host = spec.get("host") or ()  # inputs in host memory (CPU scalar tensors)
        self.label = spec.get("label") or "a compiled spyre kernel"
        self._code = {}
        static = all(s.isdigit() for s in self.sizes + self.rsizes)
        self._n = math.prod(int(s) for s in self.sizes + self.rsizes) if static else None
        self._kernels = {}  # row length -> description, when it is symbolic
        self._positions = {}  # an indexed view's positions on the device, by view and sizes
        self._symbols = {}  # (symbol expression, value) -> its int64 scalar on the card
        self._indices = {}  # (index values' slot, sizes, device) -> the row or col operand
        self._prepared = None
        self._copy = self._copy_plan()
        if (self.kernel is not None and static and "@COLS@" not in self.kernel
                and spec.get("device") is not None):
            self._prepared = torch_spyre._C._FusedKernel(self.kernel, self._n, spec["device"])
            PREPARED["prepared"] += self._prepared.prepared
            PREPARED["refused"] += self._prepared.refused

    def _copy_plan(self):
        """An eager form that is one strided copy (a KV-cache write: a load and a store of it,
        both affine, nothing reduced) as one expression of its shape, offsets and strides:
        a call evaluates it once and makes one copy between two views, instead of the general
        form's evaluation of each expression and its view bookkeeping (about 3x the host
        time of a decode step's cache write). None for any other form."""
        prog = self.prog
        if (self.rsizes or len(prog) != 2 or prog[0][0] != "load" or prog[1][0] != "store"
                or len(prog[1]) != 4 or prog[1][3] != ("v", 0)):
            return None
        load, store = prog
        if load[2][0] != "affine" or load[3] or store[2][0] != "affine":
            return None

        def tup(items):
            return "(" + "".join(f"{e}, " for e in items) + ")"

        text = tup([tup(self.sizes), load[2][1], tup(load[2][2]), store[2][1],
                    tup(store[2][2])])
        return compile(text, "<spyre copy>", "eval"), load[1], store[1]

    def _eval(self, expr, env):
        code = self._code.get(expr)
        if code is None:
            code = self._code[expr] = compile(expr, "<spyre index>", "eval")
        return eval(code, _EVAL_GLOBALS, env)

    def __call__(self, *bufs, **syms):
        try:
            self._run(bufs, syms)
        except Exception as e:
            e.add_note(f"torch_spyre: raised by {self.label}")
            raise

    def _run(self, bufs, syms):
        if self.kernel is not None:
            if self.host:
                bufs = self._upload_host_inputs(bufs)
            n = self._n if self._n is not None else math.prod(
                int(self._eval(s, syms)) for s in self.sizes + self.rsizes)
            kernel = self.kernel
            if "@COLS@" in kernel:  # a row kernel whose row length is symbolic
                cols = math.prod(int(self._eval(s, syms)) for s in self.rsizes)
                kernel = self._kernels.get(cols)
                if kernel is None:
                    kernel = self._kernels[cols] = self.kernel.replace("@COLS@", str(cols))
            if any(int(self._eval(e, syms)) >= 2 ** 24 for e in self.index_limits):
                return self._run_eager(bufs, syms)  # index values fp32 would not hold
            ins = ([bufs[k] if isinstance(k, int) else
                    self._symbol(k[1:], syms, bufs[-1].device) if k[0] == "@" else
                    self._index_values(k, syms, bufs[-1].device)
                    for k in self.slots] if self.slots is not None else
                   list(bufs[:self.n_inputs]))
            args = ins + list(bufs[self.n_inputs:])
            for k, off in self.moved.items():  # a view at a symbolic offset starts there
                t = args[k]
                start = t.storage_offset() + int(self._eval(off, syms))
                tail = t.untyped_storage().nbytes() // t.element_size() - start
                args[k] = torch.as_strided(t, (max(tail, 0),), (1,), start)
            ins, outs = args[:len(ins)], args[len(ins):]
            # an empty row kernel may still have rows (reductions of nothing): eager form
            if (n or not self.rsizes) and (
                    self._prepared.launch(ins, outs, self.label) if self._prepared is not None
                    else torch.ops.spyre.fused_pointwise(kernel, n, ins, outs, self.label)):
                STATS["fused"] += 1
                return
            STATS["refused"] += 1
        self._run_eager(bufs, syms)

    def _run_eager(self, bufs, syms):
        STATS["eager"] += 1
        if self.host and torch_spyre._C._is_capturing(bufs[-1].device.index):
            bufs = self._upload_host_inputs(bufs)  # fails the capture (see there)
        torch_spyre._C._push_launch_label(self.label)
        try:
            self.eager(bufs, syms)
        finally:
            torch_spyre._C._pop_launch_label()

    def _symbol(self, expr, syms, dev):
        """A symbol's value at this call (an index_expr's symbolic constant: a decode step's
        position) as the scalar input the description reads: int64 (``@<expr>``, a flat
        kernel's) or a float type (``@float32:<expr>``, a row kernel's, exact below 2^24:
        index_limits), one fill per new value, kept (the kernel only reads it), at most 64
        values per kernel."""
        dtype, _, text = expr.rpartition(":")
        v = int(self._eval(text, syms))
        t = self._symbols.get((expr, v))
        if t is None:
            if len(self._symbols) >= 64:
                self._symbols.clear()
            t = self._symbols[(expr, v)] = torch.full(
                (1,), v, dtype=_dtype(dtype) if dtype else torch.int64, device=dev)
        return t

    def _index_values(self, name, syms, dev):
        """A row kernel's index_expr part in the row (or column) variables, as the row (col)
        operand the description reads: the expression over the grid of those variables
        (their sizes at this call) in the operand's type (exact integers, rounded once to a
        16-bit type), made on the host, copied to the card once per size and kept (the
        kernel only reads it). name is ``#<kind>;<expr>;<variables>;<sizes>;<dtype>``
        (scheduling._row_index_expr)."""
        _, expr, names, sizes, dtype = name[1:].split(";")
        sizes = tuple(int(self._eval(s, syms)) for s in sizes.split("|"))
        t = self._indices.get((name, sizes, dev))
        if t is None:
            names = names.split(",")
            env = {}
            for k, (v, size) in enumerate(zip(names, sizes)):
                shape = [1] * len(sizes)
                shape[k] = size
                env[v] = torch.arange(size, dtype=torch.int64).view(shape)
            values = torch.as_tensor(self._eval(expr, env)).expand(sizes)
            t = values.reshape(-1).to(_dtype(dtype)).to(dev)
            if len(self._indices) >= 16:
                self._indices.clear()
            self._indices[(name, sizes, dev)] = t
        return t

    def _upload_host_inputs(self, bufs):
        """The CPU scalar inputs (an optimizer's step count) on the card, for the fused
        program: a fill of each value, which a batched call holds with its other work (a copy
        from host memory splits it). A capture would keep the value for every replay, so a
        capturing stream gets the copy, which makes the capture fail and the call run as it
        is (the replayer warns)."""
        dev, bufs = bufs[-1].device, list(bufs)
        capturing = torch_spyre._C._is_capturing(dev.index)
        for k in self.host:
            h = bufs[k]
            if not h.is_cpu:
                continue
            if capturing or h.numel() != 1:
                bufs[k] = h.to(dev)
            else:
                bufs[k] = torch.empty(h.shape, dtype=h.dtype, device=dev).fill_(h.item())
        return bufs

    # ---- the eager form ----

    def _grids(self, shape, reduced, device=None):
        """Each iteration variable (i0.., r0..) as an arange broadcast along its dim."""
        nr, grids = len(self.rsizes), {}
        for k, s in enumerate(shape):
            g = [1] * len(shape)
            g[k] = -1
            name = f"i{k}" if k < len(shape) - nr else f"r{k - len(shape) + nr}"
            n = s if not (reduced and name[0] == "r") else 1
            grids[name] = torch.arange(n, device=device).view(g)
        return grids

    def _positions_of(self, text, shape, env, ind, dev, reduced=False, clamp=None):
        """The elements an index expression addresses at every position of the iteration
        space, on `dev`; clamped into [0, clamp) inside a masked body (the mask discards
        what lies outside). Made on the host and kept, unless they depend on the kernel's
        values (indirect indices): then computed on the card at each call."""
        out = shape[:len(shape) - len(self.rsizes)] + [1] * len(self.rsizes) if reduced \
            else shape
        if "indirect" in text:
            idx = torch.as_tensor(self._eval(text, {**env, **self._grids(shape, reduced, dev),
                                                    **ind}), device=dev)
            idx = idx.expand(out)
            return idx.clamp(0, clamp - 1) if clamp is not None else idx
        key = (text, tuple(shape), reduced, tuple(sorted(env.items())), dev, clamp)
        idx = self._positions.get(key)
        if idx is None:
            idx = torch.as_tensor(self._eval(text, {**env, **self._grids(shape, reduced)}))
            idx = idx.expand(out)
            if clamp is not None:
                idx = idx.clamp(0, clamp - 1)
            idx = idx.contiguous().to(dev)
            if len(self._positions) >= 16:
                self._positions.clear()
            self._positions[key] = idx
        return idx

    def _view(self, t, view, shape, env, reduced=False, clamp=False, ind=None, gather=False):
        """(view, None) of an affine index (or (view, dims to flip)), else (the flat
        tensor, the positions of the elements): always the positions when `gather`, and
        positions clamped into the tensor when `clamp` (the loads of a masked body)."""
        nr = len(self.rsizes)
        if view[0] == "affine" and not clamp and not gather:
            off = int(self._eval(view[1], env))
            strides = [int(self._eval(s, env)) for s in view[2]]
            if reduced:
                shape = shape[:len(shape) - nr] + [1] * nr
            # a negative stride (a flip's load) starts from the other end, flipped
            back = [k for k, st in enumerate(strides) if st < 0]
            for k in back:
                off += strides[k] * (shape[k] - 1)
                strides[k] = -strides[k]
            v = torch.as_strided(t, shape, strides, t.storage_offset() + off)
            return (v, None) if not back else (v, back)
        full = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
        flat = torch.as_strided(t, (full,), (1,), t.storage_offset())
        # gathered through positions kept on the tensor's device: positions in host memory
        # would send the indexing to the CPU fallback, and a later call (a replay's capture
        # among them) finds them there without a copy
        text = view[1] if view[0] == "expr" else \
            " + ".join([f"({view[1]})"] + [f"({st}) * {v}" for st, v in
                                           zip(view[2], self._grids(shape, reduced))])
        idx = self._positions_of(text, shape, env, ind or {}, t.device, reduced,
                                 full if clamp else None)
        return flat, idx

    def eager(self, bufs, syms):
        if self._copy is not None and self._copy_call(bufs, syms):
            return
        env = dict(syms)
        shape = [int(self._eval(s, env)) for s in self.sizes + self.rsizes]
        nr, dev = len(self.rsizes), bufs[-1].device
        outer = shape[:len(shape) - nr]
        written = {id(bufs[op[1]]) for op in self.prog if op[0].startswith("store")}
        vals = []
        ind = {}  # indirect index symbol -> its value

        def get(o):
            return vals[o[1]] if o[0] == "v" else float(o[1]) if o[0] == "f" else o[1]

        for op in self.prog:
            kind, v = op[0], None
            if kind == "nop":
                pass
            elif kind == "load" and bufs[op[1]].is_cpu:
                # a CPU scalar input (an optimizer's step count) is a number: the ops on it
                # alone run on the host as the CPU computes them (beta ** step), and reach the
                # card as scalar operands
                v = bufs[op[1]].reshape(()).item()
            elif kind == "load":
                t, idx = self._view(bufs[op[1]], op[2], shape, env, clamp=op[3], ind=ind)
                if isinstance(idx, list):  # dims read backwards: flip makes a copy
                    v = t.flip(idx)
                else:
                    v = t[idx] if idx is not None else t
                    if idx is None and id(bufs[op[1]]) in written:
                        v = v.clone()  # later stores of this kernel must not show through
            elif kind in ("store", "store_reduction"):
                t, idx = self._view(bufs[op[1]], op[2], shape, env, kind == "store_reduction",
                                    ind=ind)
                x = get(op[3])
                if len(op) > 4:  # atomic_add: an accumulation, repeated positions adding up
                    if idx is None or isinstance(idx, list):
                        t, idx = self._view(bufs[op[1]], op[2], shape, env, ind=ind,
                                            gather=True)
                    x = torch.as_tensor(x, device=dev).to(t.dtype).expand(idx.shape)
                    t.index_put_((idx.reshape(-1),), x.reshape(-1), accumulate=True)
                elif isinstance(idx, list):  # dims written backwards: the value flipped
                    x = torch.as_tensor(x, device=dev).to(t.dtype).expand(t.shape)
                    t.copy_(x.flip(idx))
                elif idx is not None:
                    t[idx] = torch.as_tensor(x, device=dev).to(t.dtype).expand(idx.shape)
                elif isinstance(x, torch.Tensor):
                    t.copy_(x.expand(t.shape) if x.dim() <= t.dim() else x.reshape(t.shape))
                else:
                    t.fill_(x)
            elif kind == "constant":
                v = _number(op[1], _dtype(op[2]))
            elif kind == "to_dtype":
                x, dt = get(op[1]), _dtype(op[2])
                if isinstance(x, torch.Tensor):
                    v = x.to(dt if x.is_cpu else _on_card(dt))
                else:
                    v = _number(repr(x), dt)
            elif kind == "index_expr":  # kept on the device as an indexed view's positions
                v = self._positions_of(op[1], shape, env, ind, dev).to(_on_card(_dtype(op[2])))
            elif kind == "indirect":  # an index computed here, negative ones from the end
                x, size = get(op[1]), int(self._eval(op[2], env))
                if op[3]:
                    x = torch.where(x < 0, x + size, x) if isinstance(x, torch.Tensor) else \
                        (x + size if x < 0 else x)
                ind[op[4]] = x.long() if isinstance(x, torch.Tensor) else int(x)
            elif kind == "masked":
                mask, x, other = get(op[1]), get(op[2]), get(op[3])
                if not isinstance(mask, torch.Tensor):
                    v = x if mask else other
                else:
                    v = torch.where(mask, x, other) if isinstance(x, torch.Tensor) else \
                        torch.where(mask, torch.full((), x, device=dev), other)
            elif kind == "reduction":
                v = self._reduce(op[1], get(op[2]), shape, outer, dev)
            elif kind == "getitem":
                v = get(op[1])[op[2]]
            else:
                v = self._op(op[1], [get(a) for a in op[2]], dev)
            vals.append(v)

    def _copy_call(self, bufs, syms):
        """The copy of _copy_plan; False (nothing done) where the general form must run: a
        load from the buffer it stores to (the general form reads a clone), a CPU input, a
        negative stride (a flip)."""
        code, src_k, dst_k = self._copy
        src, dst = bufs[src_k], bufs[dst_k]
        if src is dst or src.is_cpu:
            return False
        shape, src_off, src_st, dst_off, dst_st = eval(code, _EVAL_GLOBALS, syms)
        if any(int(st) < 0 for st in src_st + dst_st):
            return False
        shape = [int(n) for n in shape]
        dst_view = torch.as_strided(dst, shape, [int(st) for st in dst_st],
                                    dst.storage_offset() + int(dst_off))
        dst_view.copy_(torch.as_strided(src, shape, [int(st) for st in src_st],
                                        src.storage_offset() + int(src_off)))
        STATS["copies"] += 1
        return True

    @staticmethod
    def _op(name, args, dev):
        fn = _FUNCS.get(name) or getattr(torch, name)
        if not any(isinstance(a, torch.Tensor) for a in args):
            return fn(*[torch.tensor(a) for a in args]).item()  # on the host, in fp32
        if name not in _TENSORS_ONLY and (isinstance(args[0], torch.Tensor) or
                                          _takes_number_first(name, fn, args)):
            return fn(*args)
        # numbers as 0-dim tensors on the card (clamp's bounds; lt(number, tensor)): fills,
        # which a batched call holds with its other work
        return fn(*[a if isinstance(a, torch.Tensor) else torch.full((), a, device=dev)
                    for a in args])

    @staticmethod
    def _reduce(kind, x, shape, outer, dev):
        if not isinstance(x, torch.Tensor):
            x = torch.full([1] * len(shape), x, device=dev)
        x = x.expand(shape).reshape(outer + [-1])
        keep = outer + [1] * (len(shape) - len(outer))
        if kind == "welford_reduce":
            mean = x.mean(-1, keepdim=True)
            m2 = ((x - mean) * (x - mean)).sum(-1, keepdim=True)
            weight = torch.full_like(mean, x.shape[-1])
            return tuple(t.reshape(keep) for t in (mean, m2, weight))
        fns = {"sum": torch.sum, "prod": torch.prod, "max": torch.amax, "min": torch.amin,
               "argmax": torch.argmax, "argmin": torch.argmin, "any": torch.any}
        return fns[kind](x, -1, keepdim=True).reshape(keep)


# element of an extern kernel's tuple result not in the layout its meta kernel promised,
# copied into that layout (in_layout)
RELAYOUTS = {"copies": 0}


def in_layout(t, size, stride):
    """An element of an extern kernel's tuple result in the layout its meta kernel gave the
    compiler (the kernels after it index it by those strides): t itself when its strides agree
    (dims of one element aside), else a copy in that layout on t's card (counted in
    RELAYOUTS). A size that differs is a defect of the kernel: it raises."""
    if not isinstance(t, torch.Tensor):
        return t
    if t.stride() == stride and t.shape == size:  # the usual case, checked first (per call)
        return t
    if tuple(t.shape) != tuple(size):
        raise AssertionError(f"extern kernel result of size {tuple(t.shape)}, its meta kernel "
                             f"says {tuple(size)}")
    if all(n <= 1 or a == b for n, a, b in zip(size, t.stride(), stride)):
        return t
    RELAYOUTS["copies"] += 1
    return torch.empty_strided(size, stride, dtype=t.dtype, device=t.device).copy_(t)


def batched(call, devices):
    """The compiled graph's ``call`` with the launches and device copies of one call held and
    submitted together when it returns (libspyre.md "Submission batching"): one submission
    per call on each card in ``devices`` (the graph's), unless the call itself waits for the
    card (a host read) or queues work that ends a submission (a fill, a host copy); either
    queues what is held first, so results and their order are unchanged. Under a capture
    (``spyre_graphs``, ``reduce-overhead``) the capture takes the work instead. A graph of one
    card runs with that card as the current device: Inductor allocates its buffers on the
    current device and guards devices only for GPUs."""
    begin, end = torch_spyre._C._batch_begin, torch_spyre._C._batch_end

    def run(args):
        streams, restore = begin(devices)
        try:
            out = call(args)
        except BaseException:
            end(streams, restore, True)
            raise
        end(streams, restore, False)
        return out

    run.__wrapped__ = call
    return run
