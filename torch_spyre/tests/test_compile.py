"""torch.compile on spyre tensors.

Registration: the Dynamo device interface, a fake kernel for every spyre:: operator, the
Granite-style decoder (prefill and greedy decode with its KV cache) under
backend="aot_eager" with fullgraph=True, dynamic=None and dynamic=True equal to eager with no
recompile per decode step and no CPU fallback, torch.compiler.reset.
"""

import copy

import pytest
import torch
from torch._dynamo.utils import counters

import torch_spyre
from conftest import close, make
from models import TinyGranite


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
    assert "spyre::rotary" in ops
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
