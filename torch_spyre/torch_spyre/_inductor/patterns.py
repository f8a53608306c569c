"""Pattern replacement into libspyre's fused kernels (Documentation/torch_compile.md).

Part of the Inductor pre-grad pass of the spyre device (``torch_spyre._dynamo``): it rewrites
the Dynamo graph (torch-level ops, ``example_value`` metadata on every node) before AOTAutograd
decomposes it, so that each match traces as ONE ``spyre::`` operator and runs as an extern
kernel that is one library call:

- ``down(act(gate(x)) * up(x))`` (SwiGLU / GeGLU: bias-free linears, one ``x``) and
  ``down(act(up(x)))`` -> ``spyre::mlp``: one ``spyre_op_mlp``;
- ``act(linear(x, w, b))`` with act relu, gelu (exact or tanh) or silu -> ``spyre::linear``:
  one ``spyre_op_linear`` with the bias and the activation in its epilogue;
- ``rotary(linear(x, w).view(B, L, H, D).transpose(1, 2), cos, sin)`` (a q or k projection
  of a rotary-embedding attention, bias-free, ``torch_spyre.rotary``) -> ``spyre::linear_rotary``
  and the same view and transpose of its [B, L, H * D] result: one ``spyre_op_linear_rotary``,
  the rotation in the matmul's epilogue (q and k are not read and written again);
- ``h = x + r; y = rms_norm(h) * w`` (``torch.rms_norm`` as nn.RMSNorm and F.rms_norm trace,
  or written out: ``h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w``, also in
  HF's form that computes in fp32 and casts back: ``w * (h32 * rsqrt(...)).to(h.dtype)``) ->
  ``spyre::add_rms_norm``: one ``spyre_op_add_rms_norm`` that writes y and h (h may have other
  users: the residual stream of a pre-norm decoder goes on with it).

A match is replaced only when every tensor of it is on spyre, all of one float type the library
computes (fp32, fp16, bf16), the weights 2-D with the sizes the kernel wants, and every
intermediate value is used by the pattern alone (a value also used elsewhere must still be
computed: the graph is left as it is; the add's h is the exception, the fused op returns it).
Inference graphs only (no gradient wanted): the spyre::
ops have no backward.
"""

import operator

import torch
import torch.nn.functional as F

_LINEAR = {torch._C._nn.linear, F.linear}
_MUL = {operator.mul, torch.mul, torch.Tensor.mul}
_RELU = {torch.relu, F.relu, torch.Tensor.relu}
_GELU = {F.gelu, torch._C._nn.gelu}
_SILU = {F.silu}
_ADD = {operator.add, torch.add, torch.Tensor.add}
_RMS_NORM = {torch.rms_norm, F.rms_norm}
_POW = {operator.pow, torch.pow, torch.Tensor.pow}
_MEAN = {torch.mean, torch.Tensor.mean}
_RSQRT = {torch.rsqrt, torch.Tensor.rsqrt}
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)

# what each replacement produced in this process (tests read it)
STATS = {"mlp": 0, "linear": 0, "linear_rotary": 0, "add_rms_norm": 0}


def _arg(n, i, name, default=None):
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name, default)


def _is_call(n, targets, methods=()):
    if not isinstance(n, torch.fx.Node):
        return False
    if n.op == "call_function":
        return n.target in targets
    return n.op == "call_method" and n.target in methods


def _linear(n):
    """(x, weight, bias) of a linear node, else None."""
    if not _is_call(n, _LINEAR):
        return None
    return _arg(n, 0, "input"), _arg(n, 1, "weight"), _arg(n, 2, "bias")


def _activation(n):
    """(input, the library's name of the activation) of an activation node, else None."""
    if _is_call(n, _RELU, ("relu",)) and not _arg(n, 1, "inplace", False):
        return _arg(n, 0, "input"), "relu"
    if _is_call(n, _SILU) and not _arg(n, 1, "inplace", False):
        return _arg(n, 0, "input"), "silu"
    if _is_call(n, _GELU):
        approximate = _arg(n, 1, "approximate", "none")
        if approximate in ("none", "tanh"):
            return _arg(n, 0, "input"), "gelu" if approximate == "none" else "gelu_tanh"
    return None


def _mul(n):
    if _is_call(n, _MUL, ("mul",)) and len(n.args) == 2 and not n.kwargs:
        return n.args
    return None


def _value(n):
    v = n.meta.get("example_value") if isinstance(n, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _library_tensors(*nodes):
    """The example values of nodes if all are spyre tensors of one library float type."""
    vs = [_value(n) for n in nodes]
    if any(v is None for v in vs):
        return None
    dtype = vs[0].dtype
    if dtype not in _FLOATS or any(v.device.type != "spyre" or v.dtype != dtype for v in vs):
        return None
    return vs


def _only_user(n, user):
    return isinstance(n, torch.fx.Node) and list(n.users) == [user]


def _bias_free(lin):
    return lin is not None and lin[2] is None


def _match_mlp(down):
    """((x, w_gate or None, w_up, w_down, activation), the block's other nodes) if `down` ends
    an MLP block, else None."""
    d = _linear(down)
    if not _bias_free(d):
        return None
    h, w_down = d[0], d[1]
    if not _only_user(h, down):
        return None
    m = _mul(h)
    if m is not None:  # gated: act(gate(x)) * up(x), either order
        for a_node, u_node in (m, m[::-1]):
            a = _activation(a_node)
            if a is None or not _only_user(a_node, h) or not _only_user(u_node, h):
                continue
            g_node, act = a
            g, u = _linear(g_node), _linear(u_node)
            if not (_bias_free(g) and _bias_free(u) and _only_user(g_node, a_node)):
                continue
            if g[0] is not u[0] or g_node is u_node:
                continue
            return (g[0], g[1], u[1], w_down, act), [h, a_node, g_node, u_node]
        return None
    a = _activation(h)  # plain: act(up(x))
    if a is None:
        return None
    u_node, act = a
    u = _linear(u_node)
    if not (_bias_free(u) and _only_user(u_node, h)):
        return None
    return (u[0], None, u[1], w_down, act), [h, u_node]


def _mlp_fits(x, w_gate, w_up, w_down):
    ts = _library_tensors(x, w_up, w_down, *([w_gate] if w_gate is not None else []))
    if ts is None:
        return False
    xv, uv, dv = ts[:3]
    if xv.dim() < 1 or uv.dim() != 2 or dv.dim() != 2:
        return False
    hidden, inter = uv.shape[1], uv.shape[0]
    if xv.shape[-1] != hidden or tuple(dv.shape) != (hidden, inter):
        return False
    return w_gate is None or tuple(ts[3].shape) == tuple(uv.shape)


def _linear_fits(x, w, b):
    ts = _library_tensors(x, w, *([b] if b is not None else []))
    if ts is None:
        return False
    xv, wv = ts[:2]
    if wv.dim() != 2 or xv.dim() < 1 or xv.shape[-1] != wv.shape[1]:
        return False
    return b is None or (ts[2].dim() == 1 and ts[2].shape[0] == wv.shape[0])


def _rotary(n):
    """(x, cos, sin) of a spyre::rotary node, else None."""
    if not _is_call(n, {torch.ops.spyre.rotary, torch.ops.spyre.rotary.default}) or \
            len(n.args) + len(n.kwargs) != 3:
        return None
    return _arg(n, 0, "x"), _arg(n, 1, "cos"), _arg(n, 2, "sin")


def _match_linear_rotary(rot):
    """(x, w, cos, sin, the view node, the transpose node, the linear node) if `rot` is
    rotary(linear(x, w).view(B, L, H, D).transpose(1, 2), cos, sin) with the projection's output
    used by that chain alone, else None."""
    r = _rotary(rot)
    if r is None:
        return None
    t, cos, sin = r
    if not (isinstance(t, torch.fx.Node) and t.op == "call_method" and t.target == "transpose"
            and tuple(t.args[1:]) in ((1, 2), (2, 1)) and not t.kwargs and _only_user(t, rot)):
        return None
    v = t.args[0]
    if not (isinstance(v, torch.fx.Node) and v.op == "call_method" and v.target == "view"
            and not v.kwargs and _only_user(v, t)):
        return None
    lin_node = v.args[0]
    lin = _linear(lin_node)
    if not (_bias_free(lin) and _only_user(lin_node, v)):
        return None
    return lin[0], lin[1], cos, sin, v, t, lin_node


def _linear_rotary_fits(x, w, cos, sin, view):
    """The library's conditions: x [B, L, in] and w [H * D, in] of one float type, the view
    [B, L, H, D], cos and sin alike with D-wide rows a whole number of 128-byte sticks, and
    the projection's columns (sticks of the output type) a whole number of heads."""
    ts = _library_tensors(x, w)
    cv, sv, vv = _value(cos), _value(sin), _value(view)
    if ts is None or cv is None or sv is None or vv is None:
        return False
    xv, wv = ts
    if xv.dim() != 3 or wv.dim() != 2 or vv.dim() != 4 or xv.shape[-1] != wv.shape[1]:
        return False
    B, L, H, D = vv.shape
    if (B, L) != tuple(xv.shape[:2]) or H * D != wv.shape[0] or D % 2:
        return False
    if cv.device.type != "spyre" or cv.dtype not in _FLOATS or sv.dtype != cv.dtype or \
            cv.shape != sv.shape or cv.stride() != sv.stride() or cv.shape[-1] != D or \
            cv.stride(-1) != 1 or (D * cv.element_size()) % 128:
        return False
    table = [s for i, s in enumerate(cv.shape) if not (cv.dim() == 4 and i == 1 and s == 1)]
    if len(table) == 2:
        table.insert(0, 1)
    if len(table) != 3 or table[0] not in (1, B) or table[1] != L:
        return False
    per_stick = 128 // xv.element_size()  # the product's columns come in whole sticks
    return -(-wv.shape[0] // per_stick) * per_stick % D == 0


def _replace_linear_rotary(graph, rot, m):
    """rot -> spyre::linear_rotary(x, w, cos, sin) viewed and transposed as before."""
    x, w, cos, sin, view, t, lin = m
    with graph.inserting_before(rot):
        fused = graph.call_function(torch.ops.spyre.linear_rotary.default, (x, w, cos, sin))
        v_new = graph.call_method("view", (fused, *view.args[1:]))
        t_new = graph.call_method("transpose", (v_new, *t.args[1:]))
    fused.meta.update(lin.meta)
    v_new.meta.update(view.meta)
    t_new.meta.update(t.meta)
    rot.replace_all_uses_with(t_new)
    for n in (rot, t, view, lin):  # users first
        graph.erase_node(n)


def _add(n):
    """(a, b) of a tensor + tensor node (no alpha), else None."""
    if not _is_call(n, _ADD, ("add",)) or len(n.args) != 2 or n.kwargs:
        return None
    a, b = n.args
    return (a, b) if isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node) else None


def _rms_norm(n):
    """(h, normalized_shape, weight, eps, the pattern's other nodes) of an RMSNorm node, else
    None: torch.rms_norm, or h * rsqrt(mean(h ** 2, -1, keepdim=True) + eps) [* w] written out
    (both products either way round) with every intermediate used by the pattern alone."""
    if _is_call(n, _RMS_NORM):
        return (_arg(n, 0, "input"), _arg(n, 1, "normalized_shape"), _arg(n, 2, "weight"),
                _arg(n, 3, "eps"), [])
    m = _mul(n)
    for inner, w in (m, m[::-1]) if m is not None else ():  # (h * rsqrt(...)) * w
        r = _rms_unit(inner)
        if r is not None and _only_user(inner, n) and isinstance(w, torch.fx.Node):
            return r[0], r[1], w, r[3], [inner, *r[4]]
    return _rms_unit(n)  # no weight


def _cast(n):
    """(source, dtype) of x.to(dtype) or x.float() with nothing else asked, else None."""
    if not isinstance(n, torch.fx.Node) or n.op != "call_method" or not n.args:
        return None
    if n.target == "float" and len(n.args) == 1 and not n.kwargs:
        return n.args[0], torch.float32
    if n.target != "to":
        return None
    if len(n.args) == 2 and not n.kwargs:
        dtype = n.args[1]
    elif len(n.args) == 1 and list(n.kwargs) == ["dtype"]:
        dtype = n.kwargs["dtype"]
    else:
        return None
    return (n.args[0], dtype) if isinstance(dtype, torch.dtype) else None


def _rms_unit(n):
    """_rms_core(n), or the same computed in fp32 and cast back as HF's Llama/Granite RMSNorm
    writes it: h.to(float32) * rsqrt(...), then .to(h.dtype). The fused op computes the norm in
    fp32 too and rounds once (after the weight) where that form rounds before and after it."""
    back = _cast(n)
    if back is None:
        return _rms_core(n)
    core, dtype = back
    r = _rms_core(core)
    if r is None or not _only_user(core, n):
        return None
    up = _cast(r[0])
    h = up[0] if up is not None else None
    hv = _value(h)
    if up is None or up[1] != torch.float32 or hv is None or hv.dtype != dtype or \
            set(r[0].users) != {core, r[4][-1]}:  # the cast feeds the product and the square
        return None
    return h, r[1], None, r[3], [core, *r[4], r[0]]


def _rms_core(n):
    """(h, normalized_shape, weight None, eps, other nodes) of h * rsqrt(mean(h^2) + eps)."""
    m = _mul(n)
    if m is None:
        return None
    for h, rs in (m, m[::-1]):
        if not (_is_call(rs, _RSQRT, ("rsqrt",)) and len(rs.args) == 1 and _only_user(rs, n)):
            continue
        s = rs.args[0]
        if not (_is_call(s, {operator.add}) and _only_user(s, rs)) or \
                not isinstance(s.args[1], (int, float)):
            continue
        mean, eps = s.args
        if not (_is_call(mean, _MEAN, ("mean",)) and _only_user(mean, s)):
            continue
        dims = _arg(mean, 1, "dim")
        if dims not in (-1, [-1], (-1,)) or not _arg(mean, 2, "keepdim", False) or \
                _arg(mean, 3, "dtype") is not None:
            continue
        sq = mean.args[0]
        if not (_is_call(sq, _POW, ("pow",)) and _only_user(sq, mean) and len(sq.args) == 2
                and sq.args[0] is h and sq.args[1] == 2 and not sq.kwargs):
            continue
        hv = _value(h)
        if hv is None or hv.dim() < 1:
            return None
        return h, [hv.shape[-1]], None, float(eps), [rs, s, mean, sq]
    return None


def _add_rms_norm_fits(a, b, h, w):
    ts = _library_tensors(a, b, h, *([w] if w is not None else []))
    if ts is None:
        return False
    av, bv, hv = ts[:3]
    if av.shape != hv.shape or bv.shape != hv.shape or hv.dim() < 1:
        return False
    return w is None or (ts[3].dim() == 1 and ts[3].shape[0] == hv.shape[-1])


def _replace_add_rms_norm(graph, norm, m):
    """norm (an RMSNorm of the add h = a + b) -> spyre::add_rms_norm: its result replaces
    norm, its h every other use of the add."""
    h, shape, w, eps, inner = m
    a, b = _add(h)
    if isinstance(w, torch.fx.Node) and w.op not in ("get_attr", "placeholder"):
        return False  # computed weights stay where they are computed
    order = {n: i for i, n in enumerate(graph.nodes)}
    if isinstance(w, torch.fx.Node) and order[w] > order[h]:
        h.prepend(w)  # a parameter read after the add: read it before, where the fused op goes
    with graph.inserting_before(h):
        fused = graph.call_function(torch.ops.spyre.add_rms_norm.default, (a, b, shape, w, eps))
        y = graph.call_function(operator.getitem, (fused, 0))
        h_new = graph.call_function(operator.getitem, (fused, 1))
    y.meta.update(norm.meta)
    h_new.meta.update(h.meta)
    fused.meta["example_value"] = (_value(norm), _value(h))
    norm.replace_all_uses_with(y)
    for n in [norm, *inner]:  # users first
        graph.erase_node(n)
    h.replace_all_uses_with(h_new)
    graph.erase_node(h)
    return True


def _replace(graph, old, target, args, dead):
    with graph.inserting_before(old):
        new = graph.call_function(target, args)
    new.meta.update(old.meta)
    old.replace_all_uses_with(new)
    for n in [old, *dead]:  # users first
        graph.erase_node(n)
    return new


def replace_fused_blocks(graph):
    """Rewrites the MLP blocks, then linear + rotary, then linear + activation, then residual
    add + RMSNorm, of an inference graph in place."""
    erased = set()
    for n in list(graph.nodes):
        m = None if n in erased else _match_mlp(n)
        if m is None or not _mlp_fits(*m[0][:4]):
            continue
        _replace(graph, n, torch.ops.spyre.mlp.default, m[0], m[1])
        erased.update([n, *m[1]])
        STATS["mlp"] += 1
    for n in list(graph.nodes):
        m = _match_linear_rotary(n)
        if m is None or not _linear_rotary_fits(*m[:5]):
            continue
        _replace_linear_rotary(graph, n, m)
        erased.update([n, *m[4:]])
        STATS["linear_rotary"] += 1
    for n in list(graph.nodes):
        if n in erased:
            continue
        a = _activation(n)
        if a is None or not _only_user(a[0], n):
            continue
        lin = _linear(a[0])
        if lin is None or not _linear_fits(*lin):
            continue
        _replace(graph, n, torch.ops.spyre.linear.default, (*lin, a[1]), [a[0]])
        erased.update([n, a[0]])
        STATS["linear"] += 1
    for n in reversed(list(graph.nodes)):  # users first: the weighted form before its core
        if n in erased:
            continue
        m = _rms_norm(n)
        add = _add(m[0]) if m is not None else None
        if add is None or not _add_rms_norm_fits(*add, m[0], m[2]):
            continue
        if _value(n) is None or _value(n).dtype != _value(m[0]).dtype:
            continue
        if _replace_add_rms_norm(graph, n, m):
            erased.update([n, m[0], *m[4]])
            STATS["add_rms_norm"] += 1
