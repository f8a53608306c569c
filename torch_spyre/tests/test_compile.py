"""torch.compile on spyre tensors (Documentation/torch_compile.md).

Registration: the Dynamo device interface, a fake kernel for every spyre:: operator, the
Granite-style decoder (prefill and greedy decode with its KV cache) under
backend="aot_eager" with fullgraph=True and dynamic=True equal to eager, torch.compiler.reset.
Inductor (the default backend): a pointwise chain in three float types over odd shapes equal to
eager and the CPU, as ONE launch, no recompile on a second call, a new shape handled; graphs
with an op the generator cannot take, non-contiguous inputs, a reduction and a matmul with an
epilogue still correct; strict mode raises for a CPU fallback inside a compiled graph as in
eager mode.
"""

import copy

import pytest
import torch
from torch._dynamo.utils import counters

import torch_spyre
from conftest import close, make, run_python
from models import TinyGranite
from torch_spyre._inductor import runtime


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch.compiler.reset()
    counters.clear()
    yield
    torch.compiler.reset()


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
        return torch.atan2(x, y).relu() + x * 2

    x, y = make((5, 17), torch.float32, 1).to("spyre"), make((5, 17), torch.float32, 2).to("spyre")
    before = runtime.STATS["eager"]
    with pytest.warns(UserWarning, match="atan2"):
        out = torch.compile(f)(x, y)
    close(out.cpu(), f(x.cpu(), y.cpu()), torch.float32)
    assert runtime.STATS["eager"] > before
    assert any("atan2" in op for op in torch_spyre.fallback_counts())


def test_strict_mode_raises_inside_a_compiled_graph(monkeypatch, fallback_reset):
    f = torch.compile(lambda x: torch.atan2(x, x) + 1)
    x = make((4, 4), torch.float32).to("spyre")
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")
    with pytest.raises(NotImplementedError, match="atan2"):
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


def test_transposed_inputs_and_reductions_run_eagerly(fallback_reset):
    def f(h, t):
        return h * t.t(), (h * h).sum(-1)

    h, t = make((8, 24), torch.float32, 1).to("spyre"), make((24, 8), torch.float32, 3).to("spyre")
    g = torch.compile(f)
    g(h, t)
    before = runtime.STATS["eager"]
    (p, s), ops = launches(g, h, t)
    rp, rs = f(h.cpu(), t.cpu())
    close(p.cpu(), rp, torch.float32)
    close(s.cpu(), rs, torch.float32, scale=100)
    assert runtime.STATS["eager"] > before and "spyre::fused_pointwise" not in ops, ops
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
    assert {"aten::mm", "spyre::rotary", "aten::scaled_dot_product_attention", "aten::rms_norm",
            "spyre::fused_pointwise"} <= ops, ops
    # the RMSNorms stay the library's kernel (not decomposed): no more launches than eager
    with torch.no_grad(), torch_spyre.profiler.profile() as eager:
        copy.deepcopy(base)(token, prompt.shape[1] + 4)
    assert len(prof.events) <= 3 * len(eager.events), (len(prof.events), len(eager.events))


def test_import_leaves_dynamo_alone():
    r = run_python("import sys, torch, torch_spyre; print('torch._dynamo' in sys.modules); "
                   "import torch._dynamo.device_interface as di; "
                   "print(di.get_interface_for_device('spyre').__name__)")
    assert r.returncode == 0 and r.stdout.split() == ["False", "SpyreInterface"], r.stderr
