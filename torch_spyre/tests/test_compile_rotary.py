"""Rotary in the q/k projections' epilogue under torch.compile (Documentation/torch_compile.md
"Pattern replacement"): ``rotary(linear(x, w).view(B, L, H, D).transpose(1, 2), cos, sin)``
becomes ONE ``spyre::linear_rotary`` launch (``spyre_op_linear_rotary``) in three float types,
equal to eager and the CPU; the Granite-shaped layer (GQA: 4 query / 2 KV heads) fuses both
projections and equals eager; a projection with another user and a shape the library cannot
take keep linear + rotary; the eager op itself, its fallback, and its CPU form.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import profiled_launches as launches, FLOATS, close, make
from models import GraniteDecoderLayer, rope_tables


pytestmark = pytest.mark.usefixtures("clean_dynamo")


def reference(x, w, cos, sin, heads):
    """On the CPU in fp32: the projection, then the rotation per head."""
    b, L, _ = x.shape
    q = F.linear(x.float(), w.float()).view(b, L, heads, -1).transpose(1, 2)
    return torch.ops.spyre.rotary(q, cos.float(), sin.float())


class Projection(torch.nn.Module):
    """A q projection with rotary as models.GraniteDecoderLayer writes it; `also` returns the
    projection's output too (another user: the pattern must not take it)."""

    def __init__(self, hidden, heads, head_dim, max_len, also=False):
        super().__init__()
        torch.manual_seed(3)
        self.heads, self.head_dim, self.also = heads, head_dim, also
        self.q_proj = torch.nn.Linear(hidden, heads * head_dim, bias=False)
        cos, sin = rope_tables(max_len, head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        b, L, _ = x.shape
        p = self.q_proj(x)
        q = p.view(b, L, self.heads, self.head_dim).transpose(1, 2)
        q = torch_spyre.rotary(q, self.cos[:L], self.sin[:L])
        return (q, p) if self.also else q


@pytest.mark.parametrize("dtype", FLOATS)
def test_projection_with_rotary_is_one_launch(dtype, fallback_reset):
    from torch_spyre._inductor import patterns

    head_dim = 32 if dtype == torch.float32 else 64  # cos/sin rows of whole sticks
    base = Projection(128, 3, head_dim, 16).to(dtype)
    x = make((2, 7, 128), torch.float32, 1).to(dtype)
    want = reference(x, base.q_proj.weight, base.cos[:7], base.sin[:7], 3)
    model = copy.deepcopy(base).to("spyre")
    before = patterns.STATS["linear_rotary"]
    with torch.no_grad():
        compiled = torch.compile(model, fullgraph=True)
        compiled(x.to("spyre"))
        got, ops, n = launches(compiled, x.to("spyre"))
    assert patterns.STATS["linear_rotary"] == before + 1
    assert ops == ["spyre::linear_rotary"] and n == 1, ops
    assert got.shape == want.shape
    close(got.cpu(), want.to(dtype), dtype, scale=4)
    with torch.no_grad():
        eager = copy.deepcopy(base).to("spyre")(x.to("spyre"))
    close(got.cpu(), eager.cpu(), dtype, scale=4)
    assert torch_spyre.fallback_counts() == {}


def test_near_misses_keep_linear_and_rotary(fallback_reset):
    from torch_spyre._inductor import patterns

    x = make((1, 5, 128), torch.float32, 2).half()
    # the projection's output is returned too; fp16 heads of 32 (64-byte cos/sin rows: not
    # whole sticks, which the library needs)
    for model, what in ((Projection(128, 2, 64, 8, also=True), "other user"),
                        (Projection(128, 2, 32, 8), "32-wide fp16 heads")):
        model = model.half()
        want = model(x)
        torch.compiler.reset()
        before = patterns.STATS["linear_rotary"]
        with torch.no_grad():
            compiled = torch.compile(copy.deepcopy(model).to("spyre"), fullgraph=True)
            compiled(x.to("spyre"))
            got, ops, _ = launches(compiled, x.to("spyre"))
        assert patterns.STATS["linear_rotary"] == before, what
        assert "spyre::linear_rotary" not in ops and "aten::mm" in ops, (what, ops)
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            close(g.cpu(), w, torch.float16, scale=4)


def test_granite_layer_fuses_q_and_k(fallback_reset):
    """The Granite-shaped layer (GQA), prefill from 0: both projections become
    spyre::linear_rotary, no spyre::rotary is left, and the result and KV cache equal eager."""
    from torch_spyre._inductor import patterns

    torch.manual_seed(0)
    base = GraniteDecoderLayer(256, 4, 2, 512, 64).half().to("spyre")
    x = make((1, 24, 256), torch.float32, 3).half().to("spyre")
    model = copy.deepcopy(base)
    before = patterns.STATS["linear_rotary"]
    with torch.no_grad():
        want = base(x, 0)
        compiled = torch.compile(model, fullgraph=True, dynamic=False)
        compiled(x, 0)
        got, ops, n = launches(compiled, x, 0)
        _, eager_ops, ne = launches(copy.deepcopy(base), x, 0)
    assert patterns.STATS["linear_rotary"] == before + 2
    assert ops.count("spyre::linear_rotary") == 2 and "spyre::rotary" not in ops, ops
    assert n < ne, (ops, eager_ops)
    close(got.cpu(), want.cpu(), torch.float16, scale=10)
    close(model.k_cache.cpu(), base.k_cache.cpu(), torch.float16, scale=10)


def test_the_eager_op_and_its_fallbacks(fallback_reset):
    x = make((2, 5, 96), torch.float32, 4)
    w = make((128, 96), torch.float32, 5)
    cos, sin = rope_tables(5, 32)
    want = reference(x, w, cos, sin, 4).transpose(1, 2).reshape(2, 5, 128)
    dev = [t.to("spyre") for t in (x, w, cos, sin)]
    with torch.no_grad():
        got, ops, n = launches(torch.ops.spyre.linear_rotary, *dev)
    assert ops == ["spyre::linear_rotary"] and n == 1, ops
    close(got.cpu(), want, torch.float32, scale=4)
    # per-sequence tables [B, 1, L, D] (Hugging Face's form)
    bc, bs = cos.expand(2, 1, 5, 32).contiguous(), sin.expand(2, 1, 5, 32).contiguous()
    with torch.no_grad():
        got, ops, _ = launches(torch.ops.spyre.linear_rotary, dev[0], dev[1], bc.to("spyre"),
                               bs.to("spyre"))
    assert ops == ["spyre::linear_rotary"], ops
    close(got.cpu(), want, torch.float32, scale=4)
    # CPU tensors: the composite (linear, then rotary)
    close(torch.ops.spyre.linear_rotary(x, w, cos, sin), want, torch.float32)
    assert torch_spyre.fallback_counts() == {}
    # cos/sin rows off a stick (slices on the card): the library refuses, linear + rotary run
    # instead (rotary, refused too, on the CPU)
    c2 = torch.cat([cos, cos], 1).to("spyre")[:, 1:33]
    s2 = torch.cat([sin, sin], 1).to("spyre")[:, 1:33]
    with torch.no_grad():
        got, ops, _ = launches(torch.ops.spyre.linear_rotary, dev[0], dev[1], c2, s2)
    assert "spyre::linear_rotary" not in ops and "aten::mm" in ops, ops
    close(got.cpu(), reference(x, w, c2.cpu(), s2.cpu(), 4).transpose(1, 2).reshape(2, 5, 128),
          torch.float32, scale=4)
