"""Residual add + RMSNorm under torch.compile (Documentation/torch_compile.md "Pattern
replacement"): ``h = x + r; y = rms_norm(h) * w`` in the nn.RMSNorm / F.rms_norm form and
written out (also in HF's form that computes in fp32 and casts back) becomes ONE
``spyre::add_rms_norm`` launch that also returns h, in three float types, equal to eager and
the CPU; near misses stay as they are; the decoder's residual stream fuses (TinyGranite: the
post-attention norm and the final norm); the eager op itself, its fallback when the library
refuses, and its CPU form.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import profiled_launches as launches, close, make
from models import TinyGranite


pytestmark = pytest.mark.usefixtures("clean_dynamo")


def written(h, w, eps=1e-6):  # models written after HF's Llama/Granite RMSNorm, without casts
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w


class PreNorm(torch.nn.Module):
    """h = x + r, normalized; h is returned too (a decoder's residual stream goes on with it)."""

    def __init__(self, cols, form):
        super().__init__()
        torch.manual_seed(4)
        self.norm = torch.nn.RMSNorm(cols, eps=1e-6)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
        self.form = form

    def forward(self, x, r):
        h = x + r
        w = self.norm.weight
        if self.form == "module":
            y = self.norm(h)
        elif self.form == "functional":  # no weight, torch's default eps
            y = F.rms_norm(h, h.shape[-1:])
        elif self.form == "written":
            y = written(h, w)
        elif self.form == "hf":  # HF's LlamaRMSNorm: in fp32, cast back, then the weight
            h32 = h.to(torch.float32)
            y = w * (h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(h.dtype)
        elif self.form == "hf_float_no_weight":
            h32 = h.float()
            y = (h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype=h.dtype)
        else:  # written, weight first
            y = w * (torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * h)
        return y, h


def reference(x, r, w, form, dtype):
    """On the CPU: h rounded to dtype as torch computes it, the norm in fp32."""
    h = x + r
    hf = h.float()
    if form == "functional":
        y = F.rms_norm(hf, hf.shape[-1:], eps=torch.finfo(dtype).eps)
    elif form == "hf_float_no_weight":
        y = F.rms_norm(hf, hf.shape[-1:], eps=1e-6)
    else:
        y = F.rms_norm(hf, hf.shape[-1:], w.float(), eps=1e-6)
    return y.to(dtype), h


def compiled_twice(module, *args):
    g = torch.compile(module, fullgraph=True)
    with torch.no_grad():
        g(*args)
        return launches(g, *args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("form", ["module", "functional", "written", "written_w_first", "hf",
                                  "hf_float_no_weight"])
def test_residual_add_rms_norm_is_one_launch(dtype, form, fallback_reset):
    from torch_spyre._inductor import patterns

    cpu = PreNorm(200, form).to(dtype)
    dev = copy.deepcopy(cpu).to("spyre")
    xc = make((3, 7, 200), torch.float32, 1).to(dtype)
    rc = make((3, 7, 200), torch.float32, 2).to(dtype)
    x, r = xc.to("spyre"), rc.to("spyre")
    before = patterns.STATS["add_rms_norm"]
    (y, h), ops, n = compiled_twice(dev, x, r)
    assert patterns.STATS["add_rms_norm"] == before + 1, form
    assert ops == ["spyre::add_rms_norm"] and n == 1, (ops, n)
    with torch.no_grad():
        (ye, he), eager_ops, ne = launches(dev, x, r)
        yw, hw = reference(xc, rc, cpu.norm.weight.detach(), form, dtype)
    assert ne >= 2, eager_ops  # the add, then the norm (or its pieces)
    assert y.dtype == dtype and y.shape == x.shape
    assert torch.equal(h.cpu(), hw) and torch.equal(h.cpu(), he.cpu())
    close(y.cpu(), ye.cpu(), dtype, scale=4)
    close(y.cpu(), yw, dtype, scale=4)
    assert torch_spyre.fallback_counts() == {}


class NearMiss(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, 64))

    def forward(self, x, r):
        if self.kind == "broadcast":  # r [64]: the add broadcasts
            return F.rms_norm(x + r[0], (64,), self.w)
        if self.kind == "fp32_weight":  # the norm promotes to fp32
            return F.rms_norm(x + r, (64,), self.w.float())
        if self.kind == "mean_dim0":  # not a norm over the last dim
            h = x + r
            return h * torch.rsqrt(h.pow(2).mean(0, keepdim=True) + 1e-6) * self.w
        if self.kind in ("hf_h32_used", "hf_back_to_fp32"):
            h32 = (x + r).float()
            n = h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + 1e-6)
            if self.kind == "hf_back_to_fp32":  # cast back to a type other than h's: fp32 out
                return self.w.float() * n.to(torch.float32)
            return self.w * n.to(x.dtype), h32  # the fp32 copy of h is also an output
        h = x + r  # "inner_used": the unweighted norm is also an output
        n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return n * self.w, n


@pytest.mark.parametrize("kind", ["broadcast", "fp32_weight", "mean_dim0", "inner_used",
                                  "hf_h32_used", "hf_back_to_fp32"])
def test_a_near_miss_is_not_replaced(kind, fallback_reset):
    from torch_spyre._inductor import patterns

    cpu = NearMiss(kind).half()
    dev = copy.deepcopy(cpu).to("spyre")
    xc, rc = make((5, 64), torch.float32, 3).half(), make((5, 64), torch.float32, 4).half()
    before = patterns.STATS["add_rms_norm"]
    out, ops, _ = compiled_twice(dev, xc.to("spyre"), rc.to("spyre"))
    # the unweighted core of "inner_used" is still a residual add + RMSNorm (its product with
    # the weight is not part of it)
    fused = kind == "inner_used"
    assert patterns.STATS["add_rms_norm"] == before + fused, kind
    assert ("spyre::add_rms_norm" in ops) == fused, ops
    with torch.no_grad():
        want = cpu.float()(xc.float(), rc.float())
    for o, w in zip(out if isinstance(out, tuple) else (out,),
                    want if isinstance(want, tuple) else (want,)):
        close(o.cpu().to(w.dtype), w, torch.float16, scale=8)


def test_the_decoder_residual_stream_fuses(fallback_reset):
    """TinyGranite: the post-attention add + norm and the layer's output add + final norm each
    become one spyre::add_rms_norm; the logits stay those of eager."""
    from torch_spyre._inductor import patterns

    base = TinyGranite().to("spyre")
    prompt = torch.randint(0, 512, (1, 9), generator=torch.Generator().manual_seed(5))
    prompt = prompt.to("spyre")
    model = copy.deepcopy(base)
    before = patterns.STATS["add_rms_norm"]
    with torch.no_grad():
        want = base(prompt, 0)
        compiled = torch.compile(model, fullgraph=True)
        compiled(prompt, 0)  # compiles; the second call writes the same KV entries again
        got, ops, n = launches(compiled, prompt, 0)
    assert patterns.STATS["add_rms_norm"] == before + 2
    assert ops.count("spyre::add_rms_norm") == 2 and ops.count("aten::rms_norm") == 1, ops
    close(got.cpu(), want.cpu(), torch.float32, scale=10)
    with torch.no_grad():
        _, eager_ops, ne = launches(copy.deepcopy(base), prompt, 0)
    assert n < ne, (ops, eager_ops)


def test_the_eager_op_and_its_fallbacks(fallback_reset):
    xc = make((6, 96), torch.float32, 6).half()
    rc = make((96, 6), torch.float32, 7).half().t()  # not dense: made dense on the card
    wc = torch.linspace(0.5, 1.5, 96).half()
    h_want = xc + rc
    y_want = F.rms_norm(h_want.float(), (96,), wc.float(), eps=1e-5).half()
    x, r, w = xc.to("spyre"), rc.to("spyre"), wc.to("spyre")
    with torch.no_grad():
        (y, h), ops, _ = launches(torch.ops.spyre.add_rms_norm, x, r, [96], w, 1e-5)
    assert ops[-1] == "spyre::add_rms_norm", ops
    assert torch.equal(h.cpu(), h_want)
    close(y.cpu(), y_want, torch.float16, scale=4)
    # CPU tensors: the composite (add, then rms_norm)
    y_cpu, h_cpu = torch.ops.spyre.add_rms_norm(xc.float(), rc.float(), [96], wc.float(), 1e-5)
    close(y_cpu, F.rms_norm(xc.float() + rc.float(), (96,), wc.float(), eps=1e-5),
          torch.float32)
    # a row too long for the fused program: the library refuses, add + rms_norm run instead
    long_x, long_r = make((1, 1 << 20), torch.float32, 8), make((1, 1 << 20), torch.float32, 9)
    with torch.no_grad():
        (y, h), ops, _ = launches(torch.ops.spyre.add_rms_norm, long_x.to("spyre"),
                                  long_r.to("spyre"), [1 << 20], None, 1e-5)
    assert "spyre::add_rms_norm" not in ops and "aten::rms_norm" in ops, ops
    assert torch.equal(h.cpu(), long_x + long_r)
    close(y.cpu(), F.rms_norm(long_x + long_r, (1 << 20,), eps=1e-5), torch.float32, scale=4)
    assert torch_spyre.fallback_counts() == {}
