"""torch.compile on spyre tensors (Documentation/torch_compile.md).

Registration: the Dynamo device interface, a fake kernel for every spyre:: operator, the
Granite-style decoder (prefill and greedy decode with its KV cache) under
backend="aot_eager" with fullgraph=True and dynamic=True equal to eager, torch.compiler.reset.
Inductor (the default backend): a pointwise chain in three float types over odd shapes equal to
eager and the CPU, as ONE launch, no recompile on a second call, a new shape handled; graphs
with an op the generator cannot take, non-contiguous inputs, a reduction and a matmul with an
epilogue still correct; strict mode raises for a CPU fallback inside a compiled graph as in
eager mode; a fused group is cut at a node the generator refuses (a prod) when that saves
launches. Row kernels: softmax, log_softmax, layer_norm, RMSNorm, a masking chain and
var_mean (written out and F.layer_norm) as ONE launch each; Inductor's cache key holds the
backend's sources.
"""

import copy
import os

import pytest
import torch
import torch.utils._pytree as pytree
from torch._dynamo.utils import counters

import torch_spyre
from conftest import close, make, profiled_launches, run_python
from models import BertEncoderLayer, TinyGranite
from torch_spyre._inductor import runtime


pytestmark = pytest.mark.usefixtures("clean_dynamo")


def graphs():
    return counters["stats"]["unique_graphs"]


# ---- registration ----

def test_device_interface():
    from torch._dynamo.device_interface import get_interface_for_device

    di = get_interface_for_device("spyre")
    assert di.device_count() == 2 and di.is_available()
    with di.device(1):
        assert di.current_device() == 1 and di.Worker.current_device() == 1
    assert di.current_device() == 0
    props = di.get_device_properties(1)
    assert props.name.startswith("spyre") and props.multi_processor_count == 32
    s = di.Stream()
    assert isinstance(s, torch.spyre.Stream) and di.get_raw_stream(0) == di.current_stream().stream_id
    e = di.Event(enable_timing=True)
    e.record()
    di.synchronize()
    assert e.query()


def test_every_spyre_op_has_a_fake_kernel():
    from torch._library.simple_registry import singleton

    ops = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("spyre::")]
    assert "spyre::rotary" in ops and "spyre::fused_pointwise" in ops
    for name in ops:
        assert singleton.find(name).fake_impl.kernel is not None, name
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(1, 4, 6, 8, device="spyre")
        y = torch.ops.spyre.rotary(x, torch.empty(6, 8, device="spyre"), torch.empty(6, 8, device="spyre"))
    assert y.shape == x.shape and y.device.type == "spyre"


def greedy(fn, prompt, steps):
    """Prefill, then greedy decode steps; the logits of every step."""
    with torch.no_grad():
        logits = fn(prompt, 0)[:, -1]
        out, pos = [logits], prompt.shape[1]
        for _ in range(steps):
            logits = fn(logits.argmax(-1, keepdim=True), pos)[:, -1]
            out.append(logits)
            pos += 1
    return out


@pytest.fixture(scope="module")
def decoder():
    cpu = TinyGranite()
    prompt = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(3))
    dev = copy.deepcopy(cpu).to("spyre")
    return dev, prompt.to("spyre"), greedy(dev, prompt.to("spyre"), 4)


@pytest.mark.parametrize("dynamic", [None, True])
def test_decoder_under_aot_eager(decoder, dynamic, fallback_reset):
    base, prompt, want = decoder
    model = copy.deepcopy(base)  # its own KV cache
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True, dynamic=dynamic)
    got = greedy(compiled, prompt, 4)
    for g, w in zip(got, want):
        assert g.device.type == "spyre"
        close(g.cpu(), w.cpu(), torch.float32, scale=10)
    assert [int(g.argmax()) for g in got] == [int(w.argmax()) for w in want]
    close(model.layer.k_cache.cpu(), base.layer.k_cache.cpu(), torch.float32, scale=10)
    # prefill and decode (is_causal differs): a graph each, and for dynamic=None one more when
    # the position first changes (automatic dynamic shapes); then none per step
    n = graphs()
    assert n <= (2 if dynamic else 3), counters["stats"]
    token = torch.full((1, 1), 7, device="spyre")
    with torch.no_grad():
        for pos in range(prompt.shape[1] + 4, prompt.shape[1] + 7):
            compiled(token, pos)
    assert graphs() == n, counters["stats"]
    assert torch_spyre.fallback_counts() == {}


def test_compiler_reset():
    f = torch.compile(lambda x: torch.relu(x) * 2, backend="aot_eager")
    x = make((4, 8), torch.float32).to("spyre")
    close(f(x).cpu(), torch.relu(x.cpu()) * 2, torch.float32)
    assert graphs() == 1
    torch.compiler.reset()
    close(f(x).cpu(), torch.relu(x.cpu()) * 2, torch.float32)
    assert graphs() == 2  # compiled again after the reset


# ---- Inductor ----

def chain(x, y):
    return torch.relu(x * y + 1.5) - x.exp()


def launches(fn, *args):
    with torch_spyre.profiler.profile() as prof:
        out = fn(*args)
    return out, [e.aten_op for e in prof.events]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_pointwise_chain_is_one_launch(dtype, fallback_reset):
    f = torch.compile(chain)
    for shape in [(7, 33), (3, 5, 129)]:
        xc, yc = make(shape, torch.float32, 1).to(dtype), make(shape, torch.float32, 2).to(dtype)
        x, y = xc.to("spyre"), yc.to("spyre")
        before = dict(runtime.STATS)
        out = f(x, y)  # compiles (the second shape: again, with dynamic sizes)
        after_compile = graphs()
        out, ops = launches(f, x, y)
        assert graphs() == after_compile, "a second call compiles nothing"
        assert ops == ["spyre::fused_pointwise"], ops
        assert runtime.STATS["fused"] - before["fused"] == 2 and runtime.STATS["eager"] == before["eager"]
        eager, eager_ops = launches(chain, x, y)
        assert len(eager_ops) == 5, eager_ops
        assert out.dtype == dtype and out.shape == shape
        close(out.cpu(), eager.cpu(), dtype, scale=4)
        close(out.cpu(), chain(xc.float(), yc.float()).to(dtype), dtype, scale=4)
    assert graphs() == 2
    assert torch_spyre.fallback_counts() == {}


class TextCalls:
    """Counts the calls of the text path (torch.ops.spyre.fused_pointwise: parse and plan
    lookup per call) while installed."""

    def __init__(self, monkeypatch):
        self.n, real = 0, torch.ops.spyre.fused_pointwise

        def counted(*args):
            self.n += 1
            return real(*args)

        monkeypatch.setattr(torch.ops.spyre, "fused_pointwise", counted)


def test_kernels_are_prepared_when_the_graph_loads(monkeypatch, fallback_reset):
    """A static graph's fused kernels are prepared (planned, generated, loaded) when Inductor
    loads the compiled graph and launched by handle: no call takes the text path, the first
    included; on a graph of spyre:1 too. With dynamic sizes the text path plans each size at
    its first call. A kernel the library refuses is refused once, when the graph loads: its
    calls run the eager form without asking the library again."""
    text = TextCalls(monkeypatch)
    x, y = make((5, 77), torch.float32, 1), make((5, 77), torch.float32, 2)
    for dev in ("spyre", "spyre:1"):
        before, loaded = dict(runtime.STATS), dict(runtime.PREPARED)
        f = torch.compile(chain)
        out, ops = launches(f, x.to(dev), y.to(dev))  # compiles, loads, calls
        out2 = f(x.to(dev), y.to(dev))
        assert runtime.PREPARED["prepared"] - loaded["prepared"] == 1, runtime.PREPARED
        assert runtime.STATS["fused"] - before["fused"] == 2, runtime.STATS
        assert ops == ["spyre::fused_pointwise"], ops
        assert text.n == 0, "a static kernel took the text path"
        assert out.device == torch.device(dev if dev != "spyre" else "spyre:0")
        close(out.cpu(), chain(x, y), torch.float32, scale=4)
        assert torch.equal(out.cpu(), out2.cpu())
        torch.compiler.reset()
    g = torch.compile(chain, dynamic=True)
    loaded = dict(runtime.PREPARED)
    for n in (40, 41):
        xs, ys = make((3, n), torch.float32, 1), make((3, n), torch.float32, 2)
        close(g(xs.to("spyre"), ys.to("spyre")).cpu(), chain(xs, ys), torch.float32, scale=4)
    assert runtime.PREPARED == loaded and text.n == 2, (runtime.PREPARED, text.n)
    # odd long rows: the library refuses them (test_row_kernel_dynamic_rows_and_a_refused_long_row)
    torch.compiler.reset()
    text.n = 0
    xl = make((2, 100001), torch.float16).to("spyre")
    h = torch.compile(softmax_d)
    before, loaded = dict(runtime.STATS), dict(runtime.PREPARED)
    for _ in range(2):
        close(h(xl).cpu(), torch.softmax(xl.cpu().float(), -1).half(), torch.float16)
    assert text.n == 0, text.n
    assert runtime.PREPARED["refused"] - loaded["refused"] == 1, runtime.PREPARED
    assert runtime.PREPARED["prepared"] == loaded["prepared"], runtime.PREPARED
    assert runtime.STATS["eager"] - before["eager"] == 2, runtime.STATS
    assert torch_spyre.fallback_counts() == {}


def test_scalars_broadcast_tensors_and_several_outputs(fallback_reset):
    def f(x, s):
        a = torch.sigmoid(x) / (2.0 - x)
        return a, (torch.tanh(a * s).abs() + 0.5).rsqrt() + torch.sqrt(x.abs())

    x, s = make((129, 3), torch.float32).to("spyre"), torch.tensor(0.75).to("spyre")
    (a, b), ops = launches(torch.compile(f), x, s)
    (a, b), ops = launches(torch.compile(f), x, s)
    ra, rb = f(x.cpu(), s.cpu())
    close(a.cpu(), ra, torch.float32)
    close(b.cpu(), rb, torch.float32, scale=4)
    assert ops == ["spyre::fused_pointwise"], ops


def test_an_input_off_a_stick_runs_the_eager_form(fallback_reset):
    base = make((1 + 5 * 33,), torch.float32).to("spyre")
    x, y = base[1:].view(5, 33), make((5, 33), torch.float32, 1).to("spyre")  # x: 4 bytes in
    g = torch.compile(chain)
    before = dict(runtime.STATS)
    out = g(x, y)
    close(out.cpu(), chain(x.cpu(), y.cpu()), torch.float32, scale=4)
    assert runtime.STATS["refused"] == before["refused"] + 1, runtime.STATS
    assert torch_spyre.fallback_counts() == {}


def test_the_eager_form_takes_constant_clamp_bounds(fallback_reset):
    # clamp is maximum/minimum with a constant: torch.maximum takes tensors only (the eager
    # form raised TypeError before)
    def f(x):
        return torch.clamp(torch.round(x / 0.05), -12, 12) * 0.05

    base = make((1 + 5 * 33,), torch.float32).to("spyre")
    x = base[1:].view(5, 33)  # off a stick: the library refuses, the eager form runs
    before = dict(runtime.STATS)
    out = torch.compile(f)(x)
    assert runtime.STATS["refused"] == before["refused"] + 1, runtime.STATS
    assert torch.equal(out.cpu(), f(x.cpu()))
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_eager_form_converts_on_the_card(dtype, fallback_reset):
    # an input off a stick: the eager form runs the traced to_dtype as device-to-device
    # conversions on the card, no CPU fallback
    def f(x, y):
        return torch.relu(x.float() * y.float() + 1.5).to(x.dtype)

    base = make((1 + 5 * 33,), torch.float32).to(dtype).to("spyre")
    x, y = base[1:].view(5, 33), make((5, 33), torch.float32, 1).to(dtype).to("spyre")
    before = dict(runtime.STATS)
    torch_spyre._C._reset_copy_stats()
    out = torch.compile(f)(x, y)
    assert runtime.STATS["refused"] == before["refused"] + 1, runtime.STATS
    assert torch_spyre._C._copy_stats()["cast"] > 0
    assert torch_spyre._C._copy_stats()["through_host"] == 0
    assert torch_spyre.fallback_counts() == {}
    assert out.dtype == dtype
    close(out.cpu(), f(x.cpu(), y.cpu()), dtype)


def test_an_op_the_generator_cannot_take_runs_eagerly(fallback_reset):
    def f(x, y):
        return torch.nextafter(x, y).relu() + x * 2

    x, y = make((5, 17), torch.float32, 1).to("spyre"), make((5, 17), torch.float32, 2).to("spyre")
    before = runtime.STATS["eager"]
    with pytest.warns(UserWarning, match="nextafter"):
        out = torch.compile(f)(x, y)
    close(out.cpu(), f(x.cpu(), y.cpu()), torch.float32)
    assert runtime.STATS["eager"] > before
    assert any("nextafter" in op for op in torch_spyre.fallback_counts())



# a prod over the last dim has no kernel description (float products need the ISA): compiled
# programs with one among nodes the generator takes. name -> (function, fused launches, the
# aten ops of the prod's eager form)
def prod_in_a_row_chain(x):
    s = (x * x).mean(-1, keepdim=True)  # a row kernel
    p = (x / s).prod(-1, keepdim=True)  # the prod (its prologue: the division)
    return (x - p).exp()  # an epilogue over the rows: a flat kernel of p per row


def softmax_beside_a_prod(x):
    return torch.softmax(x, -1), x.prod(-1)  # one input: the row kernels fuse horizontally


def prod_with_an_epilogue(x):
    return (x.prod(-1, keepdim=True) * x).relu()


CUT = {"chain": (prod_in_a_row_chain, 2, {"aten::div", "aten::mul"}),
       "beside": (softmax_beside_a_prod, 1, {"aten::mul"}),
       "epilogue": (prod_with_an_epilogue, 1, {"aten::mul"})}


@pytest.mark.parametrize("name", CUT)
def test_a_fused_group_is_cut_at_a_node_the_generator_refuses(name, strict):
    # fusion keeps a node the generator refuses (the prod) out of the groups it takes: they
    # stay one fused launch each and only the prod runs its eager form (before: the whole
    # fused group ran its eager form, every op of it an aten op)
    fn, fused, prod_ops = CUT[name]
    xc = make((8, 64), torch.float32, 5) * 0.1 + 1  # products of 64 values near 1
    x = xc.to("spyre")
    g = torch.compile(fn)
    g(x)
    before = dict(runtime.STATS)
    out, ops, n = profiled_launches(g, x)
    assert runtime.STATS["fused"] - before["fused"] == fused, (runtime.STATS, ops)
    assert runtime.STATS["eager"] - before["eager"] == 1, (runtime.STATS, ops)
    assert ops.count("spyre::fused_pointwise") == fused, ops
    assert set(ops) - {"spyre::fused_pointwise"} <= prod_ops, ops
    want = fn(xc)
    for o, w in zip(out if isinstance(out, tuple) else (out,),
                    want if isinstance(want, tuple) else (want,)):
        close(o.cpu(), w, torch.float32, scale=4)


def test_a_lone_reduction_is_not_cut_from_its_refused_epilogue(strict):
    # the cut is taken when it saves launches: a row sum alone is one aten op in the eager form
    # as well, and cut off, its buffer would be read back by a gather (the epilogue's float64
    # arithmetic of the symbolic sizes has no description): one eager form as before
    def scale(x):
        return x * (1.0 / (x.shape[0] * x.shape[1])) + x.sum(1, keepdim=True) / x.shape[1]

    g = torch.compile(scale, dynamic=True)
    for shape in [(3, 5), (4, 7)]:
        xc = make(shape, torch.float32, shape[1])
        x = xc.to("spyre")
        g(x)
        before = dict(runtime.STATS)
        out, ops, n = profiled_launches(g, x)
        assert runtime.STATS["eager"] - before["eager"] == 1, (runtime.STATS, ops)
        assert runtime.STATS["fused"] == before["fused"], (runtime.STATS, ops)
        assert ops.count("aten::sum") == 1 and len(ops) == 7, ops
        close(out.cpu(), scale(xc), torch.float32)

def test_the_eager_form_reads_and_writes_flipped_views(fallback_reset):
    # a flip is a load with a negative stride; the eager form (cumprod here) and a flipped
    # store (a slice assigned a flipped tensor) take it
    def f(x, y):
        x[:, :4] = y.flip(1)
        return x.flip(1).cumprod(1)[:, -3:], x.flip(0, 1) * 2 + x

    x, y = make((6, 9), torch.float32, 1) * 0.5 + 1, make((6, 4), torch.float32, 2)
    dx, dy = x.to("spyre"), y.to("spyre")
    for got, want in zip(torch.compile(f)(dx, dy), f(x, y)):
        close(got.cpu(), want, torch.float32)
    close(dx.cpu(), x, torch.float32)
    assert torch_spyre.fallback_counts() == {}


def test_an_input_updated_by_index_put_in_place(fallback_reset):
    # Inductor's own mutation node for the eager index_put_ (the generic fallback's result broke
    # Inductor's byte count when the graph returned the input)
    def assign(x, i, v):
        x[i] = v
        return x

    def accumulate(x, i, v):
        x.index_put_((i,), v, accumulate=True)
        return x * 2

    def add(x, i, v):
        x[i] += v
        return x

    # a duplicate index for accumulate (both added); none where an assignment would leave
    # either value
    for f, i in ((assign, [1, 7]), (accumulate, [1, 7, 1]), (add, [2, 5])):
        torch.compiler.reset()
        i = torch.tensor(i)
        x, v = make((10, 4), torch.float32, 1), make((len(i), 4), torch.float32, 2)
        dx = x.to("spyre")
        got = torch.compile(f)(dx, i.to("spyre"), v.to("spyre"))
        close(got.cpu(), f(x, i, v), torch.float32)
        close(dx.cpu(), x, torch.float32)
    assert torch_spyre.fallback_counts() == {}


F = torch.nn.functional
# kernels Inductor makes with indirect indices (positions computed in the kernel), masked loads
# (paddings, pooling windows), Min/Max in their positions and accumulating stores: none of
# them has a kernel description, all of them must run as eager forms on the card (each raised
# at compile time before: "indirect indexing", "masked loads", "store mode atomic_add", or
# "Boolean value of Tensor ... is ambiguous")
INDIRECT_AND_MASKED = {
    "max_pool2d_padding": (lambda x: F.max_pool2d(x, 3, 2, padding=1), False),
    "avg_pool2d_padding": (lambda x: F.avg_pool2d(x, 3, 1, padding=1), False),
    "upsample_nearest": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), False),
    "upsample_bilinear_backward": (lambda x: F.interpolate(x, size=(9, 11), mode="bilinear",
                                                           align_corners=True), True),
    "replication_pad": (lambda x: F.pad(x, (1, 2, 1, 1), mode="replicate"), False),
    "max_pool2d_backward": (lambda x: F.max_pool2d(x, 2), True),
    "gather_backward": (lambda x: x.flatten(1).gather(1, torch.tensor(
        [[0, 5, 5, 47], [3, 3, 1, 0]], device=x.device)).sum(), True),
}


@pytest.mark.parametrize("name", INDIRECT_AND_MASKED)
def test_indirect_and_masked_loads_run_as_eager_forms(name, fallback_reset):
    f, backward = INDIRECT_AND_MASKED[name]
    x = make((2, 2, 6, 8), torch.float32, 1).requires_grad_(backward)
    dx = x.detach().to("spyre").requires_grad_(backward)
    want, got = f(x), torch.compile(f)(dx)
    close(got.detach().cpu(), want.detach(), torch.float32, scale=4)
    if backward:
        want.sum().backward()
        got.sum().backward()
        close(dx.grad.cpu(), x.grad, torch.float32, scale=4)
    assert torch_spyre.fallback_counts() == {}, torch_spyre.fallback_counts()


def test_an_accumulating_store_at_an_affine_index():
    # the eager form's atomic_add store where Inductor's index is a plain view: out[2 + i] +=
    # x[i] (its positions, then index_put_ with accumulate)
    k = runtime.SpyreKernel({
        "sizes": ["6"], "rsizes": [], "n_inputs": 1, "kernel": None, "names": ["x", "out"],
        "eager": [("load", 0, ("affine", "0", ["1"]), False),
                  ("store", 1, ("affine", "2", ["1"]), ("v", 0), "atomic_add")]})
    out = torch.ones(10).to("spyre")
    k(torch.arange(6.0).to("spyre"), out)
    assert out.cpu().tolist() == [1, 1, 1, 2, 3, 4, 5, 6, 1, 1]


def test_strict_mode_raises_inside_a_compiled_graph(monkeypatch, fallback_reset):
    f = torch.compile(lambda x: torch.nextafter(x, x) + 1)
    x = make((4, 4), torch.float32).to("spyre")
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")
    with pytest.raises(NotImplementedError, match="nextafter"):
        f(x)


def test_extern_matmul_with_a_fused_epilogue(fallback_reset):
    def f(a, b):
        return torch.relu(a @ b + 1.0) * 0.5

    a, b = make((8, 16), torch.float32, 1).to("spyre"), make((16, 24), torch.float32, 2).to("spyre")
    g = torch.compile(f)
    g(a, b)
    out, ops = launches(g, a, b)
    close(out.cpu(), f(a.cpu(), b.cpu()), torch.float32, scale=4)
    assert ops == ["aten::mm", "spyre::fused_pointwise"], ops
    assert torch_spyre.fallback_counts() == {}


def test_a_transposed_input_and_a_row_reduction_both_fuse(fallback_reset):
    def f(h, t):
        return h * t.t(), (h * h).sum(-1)

    h, t = make((8, 24), torch.float32, 1).to("spyre"), make((24, 8), torch.float32, 3).to("spyre")
    g = torch.compile(f)
    g(h, t)
    before = dict(runtime.STATS)
    (p, s), ops = launches(g, h, t)
    rp, rs = f(h.cpu(), t.cpu())
    close(p.cpu(), rp, torch.float32)
    close(s.cpu(), rs, torch.float32, scale=100)
    # the transposed product: a flat kernel with a transposed block (test_compile_layout.py);
    # the sum of squares: one row kernel
    assert runtime.STATS["eager"] == before["eager"], runtime.STATS
    assert runtime.STATS["fused"] == before["fused"] + 2, runtime.STATS
    assert ops.count("spyre::fused_pointwise") == 2, ops
    assert torch_spyre.fallback_counts() == {}


def test_the_backend_sources_are_in_inductors_cache_key(tmp_path):
    # a graph compiled by an older torch_spyre must not be served from Inductor's FX graph
    # cache: the key has a hash of the backend's sources (a no-op post-grad pass's uuid)
    import shutil

    import torch._inductor.config as config
    from torch_spyre._cache_key import BackendKey

    assert isinstance(config.post_grad_custom_post_pass, BackendKey)
    root = os.path.dirname(torch_spyre.__file__)
    copy = tmp_path / "torch_spyre"
    shutil.copytree(os.path.join(root, "_inductor"), copy / "_inductor")
    shutil.copy(os.path.join(root, "_dynamo.py"), copy / "_dynamo.py")
    key = BackendKey(str(copy)).uuid()
    assert key == config.post_grad_custom_post_pass.uuid()
    with open(copy / "_inductor" / "scheduling.py", "a") as f:
        f.write("# changed\n")
    assert BackendKey(str(copy)).uuid() != key


# ---- row kernels: reductions over the innermost dim with their epilogues ----

def softmax_d(x):
    m = x.amax(-1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(-1, keepdim=True)


def log_softmax_d(x):
    s = x - x.amax(-1, keepdim=True)
    return s - torch.log(torch.exp(s).sum(-1, keepdim=True))


def layer_norm_d(x, w, b):
    mean = x.mean(-1, keepdim=True)
    d = x - mean
    var = (d * d).mean(-1, keepdim=True)
    return d * torch.rsqrt(var + 1e-5) * w + b


def rms_norm_d(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def masked_fill_d(x, limit):
    # compares, masked_fill and where: a masking chain (scores below a per-row limit dropped),
    # softmax
    s = x.masked_fill(x < limit, float("-inf"))
    s = torch.where(s > 2.5, s * 0.5, s)
    return softmax_d(s)


def layer_norm_f(x, w, b):
    # F.layer_norm: Inductor's decomposition makes a Welford reduction (var_mean)
    return torch.nn.functional.layer_norm(x, x.shape[-1:], w, b)


def var_mean_d(x):
    v, m = torch.var_mean(x, -1, keepdim=True, correction=0)
    return (x - m) * torch.rsqrt(v + 1e-5)


# name -> (function, extra inputs: columns (> 0) or one per row (-1), eager launches at least)
ROWS = {"softmax": (softmax_d, 0, 3), "log_softmax": (log_softmax_d, 0, 3),
        "layer_norm": (layer_norm_d, 2, 3), "rms_norm": (rms_norm_d, 1, 3),
        "masked_softmax": (masked_fill_d, -1, 3), "F.layer_norm": (layer_norm_f, 2, 1),
        "var_mean": (var_mean_d, 0, 3)}


def row_args(name, shape, dtype):
    fn, extra, _ = ROWS[name]
    x = make(shape, torch.float32, 1)
    args = [x]
    if extra == -1:  # a per-row limit, [rows..., 1]
        args.append(make(shape[:-1] + (1,), torch.float32, 5) - 0.5)
    for k in range(max(extra, 0)):
        args.append(make(shape[-1:], torch.float32, 2 + k))  # weight, bias: one per column
    return fn, [a.to(dtype) for a in args]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", list(ROWS))
def test_row_reductions_are_one_launch(name, dtype, fallback_reset):
    for shape in [(5, 37), (3, 7, 129), (33, 1000)]:
        fn, cpu = row_args(name, shape, dtype)
        dev = [a.to("spyre") for a in cpu]
        g = torch.compile(fn)
        g(*dev)
        before, fallbacks = dict(runtime.STATS), dict(torch_spyre.fallback_counts())
        out, ops = launches(g, *dev)
        assert ops == ["spyre::fused_pointwise"], (name, shape, ops)
        assert torch_spyre.fallback_counts() == fallbacks  # (eager var_mean falls back)
        assert runtime.STATS["fused"] == before["fused"] + 1, runtime.STATS
        assert runtime.STATS["eager"] == before["eager"], runtime.STATS
        eager, eager_ops = launches(fn, *dev)
        assert len(eager_ops) >= ROWS[name][2], eager_ops
        assert out.dtype == dtype and out.shape == shape
        # the fused kernel computes in fp32 and rounds once: against the fp32 CPU result and
        # eager (which rounds after every op)
        want = fn(*[a.float() for a in cpu]).to(dtype)
        close(out.cpu(), want, dtype, scale=2)
        close(out.cpu(), eager.cpu(), dtype, scale=4)
        torch.compiler.reset()
    if name != "var_mean":
        assert torch_spyre.fallback_counts() == {}


def test_row_kernel_dynamic_rows_and_a_refused_long_row(fallback_reset):
    g = torch.compile(softmax_d, dynamic=True)
    for rows in (3, 11):
        x = make((rows, 45), torch.float32).to("spyre")
        out, ops = launches(g, x)
        close(out.cpu(), torch.softmax(x.cpu(), -1), torch.float32)
    assert ops == ["spyre::fused_pointwise"], ops
    # rows longer than a core's scratchpad whose rows do not start on a stick (2 x 100,001
    # fp16: long rows need stick-aligned rows unless there is one): the library refuses, the
    # eager form runs
    x = make((2, 100001), torch.float16).to("spyre")
    before = dict(runtime.STATS)
    out = torch.compile(softmax_d)(x)
    assert runtime.STATS["refused"] == before["refused"] + 1, runtime.STATS
    close(out.cpu(), torch.softmax(x.cpu().float(), -1).half(), torch.float16)
    assert torch_spyre.fallback_counts() == {}


def sum_d(x):
    return x.sum(-1)


def amax_d(x):
    return x.amax(-1)


# long rows (an LM head's logits, rows longer than a core's scratchpad): name -> (function,
# columns inputs)
LONG = {"softmax": (softmax_d, 0), "log_softmax": (log_softmax_d, 0),
        "layer_norm": (layer_norm_d, 2), "sum": (sum_d, 0), "amax": (amax_d, 0)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_long_rows_are_one_launch(dtype, fallback_reset):
    # one row of 32,000 (Inductor would split it into partial reductions: 3-5 launches) and
    # rows of 100,000 (too long for a core's scratchpad with their temporaries: the rows
    # streamed in column chunks over all cores); 16-bit rows of 100,000 do not start on a
    # stick, so one of them
    long_rows = 2 if dtype == torch.float32 else 1
    for name, (fn, cols) in LONG.items():
        for shape in [(1, 32000), (long_rows, 100000)]:
            cpu = [make(shape, torch.float32, 1) * 3] + [
                make(shape[-1:], torch.float32, 2 + k) for k in range(cols)]
            cpu = [a.to(dtype) for a in cpu]
            dev = [a.to("spyre") for a in cpu]
            g = torch.compile(fn)
            g(*dev)
            before = dict(runtime.STATS)
            out, ops = launches(g, *dev)
            assert ops == ["spyre::fused_pointwise"], (name, shape, ops)
            assert runtime.STATS["fused"] == before["fused"] + 1, (name, shape, runtime.STATS)
            want = fn(*[a.float() for a in cpu]).to(dtype)
            eager = fn(*dev).cpu()
            # a sum of 100,000 values near 3 in size: fp32 partial sums per chunk and core
            scale = 20 if name == "sum" else 4
            close(out.cpu(), want, dtype, scale=scale)
            close(out.cpu(), eager, dtype, scale=2 * scale)
            torch.compiler.reset()
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_argmax_argmin_are_one_launch(dtype, fallback_reset):
    # greedy decode's argmax over the logits: one row kernel (an int64 row output), ties to the
    # first index and NaN first as torch, rows that fit a core and long rows
    for shape in [(5, 37), (3, 32000), (1, 128256)]:
        x = make(shape, torch.float32, 1).to(dtype)
        r = shape[0] - 1
        x[0, 3], x[0, shape[1] - 2] = 9.0, 9.0  # a tied max, a tied min
        x[0, 5], x[0, shape[1] - 1] = -9.0, -9.0
        if shape[0] > 1:
            x[r, shape[1] // 2] = float("nan")
        d = x.to("spyre")
        for fn in (lambda t: t.argmax(-1), lambda t: t.argmin(-1, keepdim=True)):
            g = torch.compile(fn)
            g(d)
            out, ops = launches(g, d)
            assert ops == ["spyre::fused_pointwise"], (shape, ops)
            want = fn(x)
            assert out.dtype == torch.int64 and torch.equal(out.cpu(), want), (shape, out, want)
            torch.compiler.reset()
    assert torch_spyre.fallback_counts() == {}


# ---- pattern replacement into the library's fused kernels ----

ACTIVATIONS = {"relu": torch.relu, "gelu": torch.nn.functional.gelu,
               "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
               "silu": torch.nn.functional.silu}


def to_device(module, dtype):
    cpu = module.to(dtype)
    return cpu, copy.deepcopy(cpu).to("spyre")


def compiled_twice(module, x):
    """The compiled module's output and launches on its second call (the first compiles)."""
    g = torch.compile(module, fullgraph=True)
    with torch.no_grad():
        g(x)
        return launches(g, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_linear_bias_activation_is_one_launch(dtype, fallback_reset):
    from torch_spyre._inductor import patterns

    for i, (name, act) in enumerate(ACTIVATIONS.items()):
        torch.compiler.reset()
        cpu, dev = to_device(torch.nn.Sequential(torch.nn.Linear(40, 72), torch.nn.Module()), dtype)
        cpu[1].forward = dev[1].forward = act
        xc = make((2, 7, 40), torch.float32, i).to(dtype)
        x = xc.to("spyre")
        before = patterns.STATS["linear"]
        out, ops = compiled_twice(dev, x)
        assert patterns.STATS["linear"] == before + 1, name
        assert ops == ["spyre::linear"], (name, ops)
        with torch.no_grad():
            eager, eager_ops = launches(dev, x)
            want = cpu.float()(xc.float()).to(dtype)
            cpu.to(dtype)
        assert len(eager_ops) >= 2, eager_ops  # the matmul with its bias, then the activation
        assert out.dtype == dtype and out.shape == (2, 7, 72)
        close(out.cpu(), eager.cpu(), dtype, scale=4)
        close(out.cpu(), want, dtype, scale=4)
    # no activation: addmm, an extern kernel whose out= form is one spyre_op_linear into out
    torch.compiler.reset()
    cpu, dev = to_device(torch.nn.Linear(40, 72), dtype)
    xc = make((2, 7, 40), torch.float32, 9).to(dtype)
    out, ops = compiled_twice(dev, xc.to("spyre"))
    assert ops == ["aten::addmm"], ops
    with torch.no_grad():
        close(out.cpu(), cpu.float()(xc.float()).to(dtype), dtype, scale=4)
    assert torch_spyre.fallback_counts() == {}


class SwiGLU(torch.nn.Module):
    def __init__(self, hidden=64, inter=96, act=torch.nn.functional.silu, extra=None):
        super().__init__()
        torch.manual_seed(5)
        self.gate = torch.nn.Linear(hidden, inter, bias=False)
        self.up = torch.nn.Linear(hidden, inter, bias=False)
        self.down = torch.nn.Linear(inter, hidden, bias=False)
        self.act, self.extra = act, extra

    def forward(self, x):
        g = self.gate(x)
        a = self.act(g)
        out = self.down(a * self.up(x))
        if self.extra == "act":  # the activation is also an output: not the pattern
            return out, a
        if self.extra == "gate":  # the gate projection is also used elsewhere
            return out + g[..., :1]
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_swiglu_mlp_is_one_launch(dtype, fallback_reset):
    from torch_spyre._inductor import patterns

    for act in ["silu", "gelu_tanh"]:
        torch.compiler.reset()
        cpu, dev = to_device(SwiGLU(act=ACTIVATIONS[act]), dtype)
        xc = make((1, 5, 64), torch.float32, 7).to(dtype)
        x = xc.to("spyre")
        before = patterns.STATS["mlp"]
        out, ops = compiled_twice(dev, x)
        assert patterns.STATS["mlp"] == before + 1
        assert ops == ["spyre::mlp"], ops
        with torch.no_grad():
            eager, eager_ops = launches(dev, x)
            want = cpu.float()(xc.float()).to(dtype)
            cpu.to(dtype)
        assert len(eager_ops) >= 5, eager_ops  # three matmuls, the activation, the product
        assert out.dtype == dtype and out.shape == x.shape
        close(out.cpu(), eager.cpu(), dtype, scale=8)
        close(out.cpu(), want, dtype, scale=8)
    assert torch_spyre.fallback_counts() == {}


def test_mlp_with_dynamic_tokens_and_biases(fallback_reset):
    from torch_spyre._inductor import patterns

    cpu, dev = to_device(SwiGLU(), torch.float16)
    g = torch.compile(dev, dynamic=True, fullgraph=True)
    before = patterns.STATS["mlp"]
    with torch.no_grad():
        for tokens in [3, 17, 5]:  # one graph for every token count (but 0 and 1)
            xc = make((tokens, 64), torch.float32, tokens).half()
            out, ops = launches(g, xc.to("spyre"))
            assert ops == ["spyre::mlp"], ops
            close(out.cpu(), cpu.float()(xc.float()).half(), torch.float16, scale=8)
    assert graphs() == 1 and patterns.STATS["mlp"] == before + 1
    # linears with biases: spyre_op_mlp has none, so no MLP; gate + silu is one spyre::linear
    torch.compiler.reset()
    cpu = SwiGLU()
    cpu.gate, cpu.up = torch.nn.Linear(64, 96), torch.nn.Linear(64, 96)
    dev = copy.deepcopy(cpu).to("spyre")
    xc = make((4, 64), torch.float32, 11)
    out, ops = compiled_twice(dev, xc.to("spyre"))
    assert "spyre::mlp" not in ops and "spyre::linear" in ops, ops
    with torch.no_grad():
        close(out.cpu(), cpu(xc), torch.float32, scale=4)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("extra", ["act", "gate"])
def test_a_near_miss_mlp_is_not_replaced(extra, fallback_reset):
    from torch_spyre._inductor import patterns

    cpu, dev = to_device(SwiGLU(extra=extra), torch.float32)
    xc = make((3, 64), torch.float32, 8)
    before = dict(patterns.STATS)
    out, ops = compiled_twice(dev, xc.to("spyre"))
    assert patterns.STATS["mlp"] == before["mlp"] and "spyre::mlp" not in ops, ops
    # the activation's value is wanted: gate + silu still fuse (their linear has no other use);
    # the gate projection's value is wanted: it stays a plain matmul
    assert ("spyre::linear" in ops) == (extra == "act"), ops
    with torch.no_grad():
        want = cpu(xc)
    for o, w in zip(pytree.tree_leaves(out), pytree.tree_leaves(want)):
        close(o.cpu(), w, torch.float32, scale=4)
    assert torch_spyre.fallback_counts() == {}


def test_patterns_need_spyre_tensors_and_no_gradient(fallback_reset):
    from torch_spyre._inductor import patterns

    def targets(module, x):
        seen = []

        def backend(gm, inputs):
            patterns.replace_fused_blocks(gm.graph)
            seen.append({n.target for n in gm.graph.nodes})
            gm.recompile()
            return gm.forward

        torch.compile(module, backend=backend, fullgraph=True)(x)
        torch.compiler.reset()
        return seen[0]

    mlp, x = SwiGLU(), make((2, 64), torch.float32)
    dev = copy.deepcopy(mlp).to("spyre")
    assert torch.ops.spyre.mlp.default not in targets(mlp, x)  # CPU tensors
    assert torch.ops.spyre.mlp.default in targets(dev, x.to("spyre"))
    # a gradient wanted: Inductor's pass leaves the graph differentiable
    xs = x.to("spyre").requires_grad_()
    out, ops = launches(torch.compile(dev), xs)
    assert out.requires_grad and "spyre::mlp" not in ops and "aten::mm" in ops, ops
    close(out.detach().cpu(), mlp(x).detach(), torch.float32, scale=4)


def test_fused_block_ops_run_their_eager_form_when_the_library_refuses(fallback_reset):
    cpu = SwiGLU()
    dev = copy.deepcopy(cpu).to("spyre")
    xc = make((4, 3, 64), torch.float32, 9)
    # x [3, 4, 64] whose leading dims do not collapse into rows: spyre_op_linear refuses it
    x = xc.to("spyre").permute(1, 0, 2)
    with torch.no_grad(), torch_spyre.profiler.profile() as prof:
        lin = torch.ops.spyre.linear(x, dev.up.weight, None, "relu")
    ops = [e.aten_op for e in prof.events]
    assert "spyre::linear" not in ops and ops, ops
    close(lin.cpu(), torch.relu(xc.permute(1, 0, 2) @ cpu.up.weight.detach().t()),
          torch.float32, scale=4)
    with torch.no_grad(), torch_spyre.profiler.profile() as prof:
        out = torch.ops.spyre.mlp(x, dev.gate.weight, dev.up.weight, dev.down.weight, "silu")
    assert [e.aten_op for e in prof.events][-1] == "spyre::mlp", prof.events  # x made dense
    with torch.no_grad():
        close(out.cpu(), cpu(xc.permute(1, 0, 2)), torch.float32, scale=4)
    with pytest.raises(RuntimeError, match="unknown activation"):
        torch.ops.spyre.linear(x, dev.up.weight, None, "tanh")
    assert torch_spyre.fallback_counts() == {}


def test_decoder_under_inductor(decoder, monkeypatch, fallback_reset):
    base, prompt, want = decoder
    model = copy.deepcopy(base)
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")  # any CPU fallback raises
    compiled = torch.compile(model, fullgraph=True)
    got = greedy(compiled, prompt, 4)
    for g, w in zip(got, want):
        close(g.cpu(), w.cpu(), torch.float32, scale=10)
    assert [int(g.argmax()) for g in got] == [int(w.argmax()) for w in want]
    close(model.layer.k_cache.cpu(), base.layer.k_cache.cpu(), torch.float32, scale=10)
    n = graphs()
    token = torch.full((1, 1), 7, device="spyre")
    with torch.no_grad(), torch_spyre.profiler.profile() as prof:
        for pos in range(prompt.shape[1] + 4, prompt.shape[1] + 7):
            compiled(token, pos)
    assert graphs() == n <= 3, counters["stats"]
    ops = {e.aten_op for e in prof.events}
    assert {"aten::mm", "spyre::linear_rotary", "aten::scaled_dot_product_attention",
            "aten::rms_norm", "spyre::mlp", "spyre::add_rms_norm"} <= ops, ops
    assert "spyre::rotary" not in ops, ops  # q and k rotated in their projections' epilogue
    assert not ops & {"aten::silu", "aten::mul"}, ops  # the SwiGLU MLP is one spyre_op_mlp
    # the RMSNorms stay the library's kernel (not decomposed), the MLP block is one call (its
    # two programs), both residual adds go into the norm after them (spyre_op_add_rms_norm),
    # q and k are rotated in their projections (spyre_op_linear_rotary): 12 launches per step
    # where eager makes 19
    with torch.no_grad(), torch_spyre.profiler.profile() as eager:
        copy.deepcopy(base)(token, prompt.shape[1] + 4)
    step = sum(e.launches for e in prof.events) / 3
    print("decode step launches: compiled", step, "eager", sum(e.launches for e in eager.events))
    assert step <= 12 and step < sum(e.launches for e in eager.events) - 6, (
        step, [e.aten_op for e in prof.events], [e.aten_op for e in eager.events])


def test_bert_encoder_with_a_padding_mask_under_inductor(monkeypatch, fallback_reset):
    # a BERT-style encoder layer (post-norm attention and GELU MLP) with an additive padding
    # mask [B, 1, 1, L] (the second sequence 11 tokens of 16): compiled whole against eager on
    # the card and the CPU, no CPU fallback, no graph break, fewer launches than eager, and a
    # second mask reuses the graph
    cpu = BertEncoderLayer(hidden=128, heads=4, intermediate=256, seed=2)
    dev = copy.deepcopy(cpu).to("spyre")
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")  # any CPU fallback raises
    compiled = torch.compile(dev, fullgraph=True)
    x = make((2, 16, 128), torch.float32)
    for tokens in (11, 5):
        mask = torch.zeros(2, 1, 1, 16)
        mask[1, :, :, tokens:] = float("-inf")
        with torch.no_grad():
            ref = cpu(x, mask)
            eager = dev(x.to("spyre"), mask.to("spyre")).cpu()
            got, ops = launches(compiled, x.to("spyre"), mask.to("spyre"))
            _, eager_ops = launches(dev, x.to("spyre"), mask.to("spyre"))
        close(got.cpu(), ref, torch.float32, scale=4)
        close(got.cpu(), eager, torch.float32, scale=4)
        # the padded keys get no weight: the second sequence's output ignores what x holds there
        x2 = x.clone()
        x2[1, tokens:] += 100.0
        with torch.no_grad():
            again = compiled(x2.to("spyre"), mask.to("spyre")).cpu()
        close(again[1, :tokens], got.cpu()[1, :tokens], torch.float32, scale=4)
        assert "aten::scaled_dot_product_attention" in ops, ops
        assert len(ops) < len(eager_ops), (ops, eager_ops)
    assert graphs() == 1, counters["stats"]
    assert not counters["graph_break"], counters["graph_break"]


def submissions(device=0):
    torch.spyre.synchronize(device)
    return torch.spyre.submissions(device)


def test_a_compiled_call_is_one_submission(decoder, fallback_reset):
    """Without replay, a compiled call's launches (generated kernels and extern kernels) go to
    the card together: one submission per call (libspyre's submission batching), the same
    results; eager mode submits op by op."""
    def f(a, b, t):
        h = torch.relu(a @ b + 1.0)
        return h.softmax(-1) * t.t(), (h * h).sum(-1)

    a, b = make((8, 16), torch.float32, 1), make((16, 24), torch.float32, 2)
    t = make((24, 8), torch.float32, 3)
    da, db, dt = a.to("spyre"), b.to("spyre"), t.to("spyre")
    g = torch.compile(f)
    g(da, db, dt)
    for _ in range(2):
        before = submissions()
        (p, r), ops = launches(g, da, db, dt)
        assert submissions() - before == 1, ops
    assert len(ops) >= 2, ops
    want = f(a, b, t)
    close(p.cpu(), want[0], torch.float32, scale=4)
    close(r.cpu(), want[1], torch.float32, scale=100)
    before = submissions()
    f(da, db, dt)
    if os.environ.get("SPYRE_BACKEND") == "sim":  # the kernel backend batches by timing
        assert submissions() - before > 3

    # the decoder's decode step, compiled whole: one submission per token (plans warm: the
    # first step at a new key length loads its attention program, a copy of its own)
    base, prompt, want = decoder
    compiled = torch.compile(copy.deepcopy(base), fullgraph=True)
    greedy(compiled, prompt, 2)
    token = torch.full((1, 1), 7, device="spyre")
    with torch.no_grad():
        for pos in range(prompt.shape[1] + 2, prompt.shape[1] + 5):
            compiled(token, pos)
            before = submissions()
            compiled(token, pos)
            assert submissions() - before == 1, pos


def test_a_compiled_call_on_another_card_runs_there_in_one_submission(fallback_reset):
    """A graph of spyre:1 called while spyre:0 is current: its buffers, kernels and output on
    spyre:1 (Inductor allocates on the current device and guards only GPUs), one submission
    there, none on spyre:0, and the current device left as it was."""
    a = make((8, 40), torch.float32, 1)
    g = torch.compile(lambda x: (x.exp() + 1.0).softmax(-1) * x)
    da = a.to("spyre:1")
    g(da)
    assert torch.spyre.current_device() == 0
    before0, before1 = submissions(0), submissions(1)
    out = g(da)
    assert (submissions(0) - before0, submissions(1) - before1) == (0, 1)
    assert out.device == torch.device("spyre:1") and torch.spyre.current_device() == 0
    close(out.cpu(), (a.exp() + 1.0).softmax(-1) * a, torch.float32, scale=4)


def test_a_call_that_raises_ends_its_batch(monkeypatch, fallback_reset):
    """An exception inside a compiled call (its generated kernel, after the extern matmul was
    queued) ends the call's batch: later eager work is submitted at once, not held."""
    x, w = make((8, 16), torch.float32, 1).to("spyre"), make((16, 40), torch.float32, 2).to("spyre")
    g = torch.compile(lambda v, m: torch.relu(v @ m).sum(-1))
    want = g(x, w).cpu()

    def eager_submissions():
        before = submissions()
        x + 1.0
        return torch.spyre.submissions() - before  # not synchronized: what was queued

    eager_submissions()  # its program loaded
    expected = eager_submissions()
    assert expected >= 1
    run = runtime.SpyreKernel._run

    def failing(self, bufs, syms):
        raise RuntimeError("the kernel fails")

    monkeypatch.setattr(runtime.SpyreKernel, "_run", failing)
    with pytest.raises(RuntimeError, match="the kernel fails"):
        g(x, w)
    monkeypatch.setattr(runtime.SpyreKernel, "_run", run)
    assert eager_submissions() == expected
    close(g(x, w).cpu(), want, torch.float32, scale=10)


def test_import_leaves_dynamo_alone():
    r = run_python("import sys, torch, torch_spyre; print('torch._dynamo' in sys.modules); "
                   "import torch._dynamo.device_interface as di; "
                   "print(di.get_interface_for_device('spyre').__name__)")
    assert r.returncode == 0 and r.stdout.split() == ["False", "SpyreInterface"], r.stderr
