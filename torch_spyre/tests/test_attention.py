"""Transformer ops on the card against CPU: scaled_dot_product_attention (causal prefill,
non-causal, grouped-query heads, decode over a strided KV cache), rotary (torch.ops.spyre.rotary
against its rotate-half definition), embedding, index_select along dim 0, cat/stack, baddbmm; with no CPU fallback.
Masks and layouts the library does not take still give CPU's answers."""

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import FLOATS, close, make


def sdpa_ref(q, k, v, causal=False, gqa=False):
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                          enable_gqa=gqa).to(q.dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2)])
def test_sdpa(fallback_reset, dtype, causal, hq, hkv):
    b, L, d = 2, 37, 64
    q, k, v = make((b, hq, L, d), dtype), make((b, hkv, L, d), dtype, 1), make((b, hkv, L, d), dtype, 2)
    with torch.no_grad():
        r = F.scaled_dot_product_attention(q.to("spyre"), k.to("spyre"), v.to("spyre"),
                                           is_causal=causal, enable_gqa=hq != hkv)
    close(r.cpu(), sdpa_ref(q, k, v, causal, hq != hkv), dtype, scale=2)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_sdpa_projection_layout_and_kv_cache(fallback_reset, dtype):
    # q from a [B, L, H*D] projection viewed as [B, H, L, D] (transposed), and a decode step
    # over the first 9 positions of a 16-position cache
    b, h, d = 1, 4, 64
    x = make((b, 5, h * d), dtype)
    q = x.view(b, 5, h, d).transpose(1, 2)
    cache_k, cache_v = make((b, h, 16, d), dtype, 1), make((b, h, 16, d), dtype, 2)
    dq = x.to("spyre").view(b, 5, h, d).transpose(1, 2)
    dk, dv = cache_k.to("spyre"), cache_v.to("spyre")
    with torch.no_grad():
        r = F.scaled_dot_product_attention(dq, dk[:, :, :9], dv[:, :, :9])
        close(r.cpu(), sdpa_ref(q, cache_k[:, :, :9], cache_v[:, :, :9]), dtype, scale=2)
        r = F.scaled_dot_product_attention(dq[:, :, -1:], dk[:, :, :9], dv[:, :, :9], scale=0.3)
        ref = F.scaled_dot_product_attention(q[:, :, -1:].float(), cache_k[:, :, :9].float(),
                                             cache_v[:, :, :9].float(), scale=0.3).to(dtype)
        close(r.cpu(), ref, dtype, scale=2)
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["additive", "bool"])
@pytest.mark.parametrize("shape", ["LS", "B1LS", "BHLS", "B11S"])
def test_sdpa_with_a_mask_runs_on_the_card(fallback_reset, dtype, kind, shape):
    b, h, lq, lk, d = 2, 4, 7, 37, 64
    q, k, v = make((b, h, lq, d), dtype), make((b, h, lk, d), dtype, 1), make((b, h, lk, d), dtype, 2)
    dims = {"LS": (lq, lk), "B1LS": (b, 1, lq, lk), "BHLS": (b, h, lq, lk), "B11S": (b, 1, 1, lk)}[shape]
    if kind == "bool":
        mask = make(dims, torch.float32, 3) > -0.5
        mask[..., 0] = True  # every query sees a key
    else:
        mask = make(dims, torch.float32, 3).to(dtype)
    with torch.no_grad(), torch_spyre.profiler.profile() as prof:
        r = F.scaled_dot_product_attention(q.to("spyre"), k.to("spyre"), v.to("spyre"),
                                           attn_mask=mask.to("spyre"))
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                         attn_mask=mask if kind == "bool" else mask.float())
    close(r.cpu(), ref.to(dtype), dtype, scale=2)
    # the fused kernel, not the math path (torch itself turns a boolean mask into an additive
    # one with where() before it picks a kernel)
    ops = {e.aten_op for e in prof.events}
    assert "aten::scaled_dot_product_attention" in ops
    assert ops <= {"aten::scaled_dot_product_attention", "aten::where"}, ops
    assert torch_spyre.fallback_counts() == {}


def test_sdpa_cases_the_library_does_not_take(fallback_reset):
    q, k, v = make((1, 2, 6, 32), torch.float16), make((1, 2, 9, 32), torch.float16, 1), \
        make((1, 2, 9, 32), torch.float16, 2)
    mask = make((6, 9), torch.float32, 3).half()
    with torch.no_grad():
        # head dim 32 in fp16 (64-byte rows) and causal with Lq != Lk: the math path
        r = F.scaled_dot_product_attention(q.to("spyre"), k.to("spyre"), v.to("spyre"),
                                           is_causal=True)
        close(r.cpu(), sdpa_ref(q, k, v, True), torch.float16, scale=2)
        r = F.scaled_dot_product_attention(q.to("spyre"), k.to("spyre"), v.to("spyre"),
                                           attn_mask=mask.to("spyre"))
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask.float())
        close(r.cpu(), ref.half(), torch.float16, scale=2)


def rotate_half_ref(x, cos, sin):
    x1, x2 = x.float().chunk(2, dim=-1)
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (x.float() * cos.float() + torch.cat([-x2, x1], -1) * sin.float()).to(x.dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("table", ["LD", "BLD", "B1LD"])
def test_rotary(fallback_reset, dtype, table):
    b, h, L, d = 2, 3, 11, 64
    x = make((b, h, L, d), dtype)
    pos = torch.arange(L).float()[:, None] * (10000 ** (-torch.arange(0, d, 2).float() / d))
    ang = torch.cat([pos, pos], -1)
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
    if table != "LD":
        cos, sin = cos.expand(b, L, d).contiguous(), sin.expand(b, L, d).contiguous()
    if table == "B1LD":
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    ref = rotate_half_ref(x, cos, sin)
    close(torch_spyre.rotary(x, cos, sin), ref, dtype)  # the CPU kernel
    r = torch_spyre.rotary(x.to("spyre"), cos.to("spyre"), sin.to("spyre"))
    assert r.device.type == "spyre"
    close(r.cpu(), ref, dtype)
    assert torch_spyre.fallback_counts() == {}


def test_rotary_falls_back_for_unaligned_rows(fallback_reset):
    x = make((1, 2, 5, 6), torch.float32)  # 24-byte rows
    cos, sin = make((5, 6), torch.float32, 1), make((5, 6), torch.float32, 2)
    r = torch_spyre.rotary(x.to("spyre"), cos.to("spyre"), sin.to("spyre"))
    close(r.cpu(), rotate_half_ref(x, cos, sin), torch.float32)
    assert "spyre::rotary" in torch_spyre.fallback_counts()
    with pytest.raises(RuntimeError, match="head dim must be even"):
        torch_spyre.rotary(make((1, 1, 2, 3), torch.float32), cos[:2, :3], sin[:2, :3])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("itype", [torch.int64, torch.int32])
def test_embedding(fallback_reset, dtype, itype):
    w = make((50, 64), dtype)
    idx = torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(1)).to(itype)
    emb = torch.nn.Embedding(50, 64).to(dtype)
    with torch.no_grad():
        emb.weight.copy_(w)
        r = emb.to("spyre")(idx.to("spyre"))
    assert torch.equal(r.cpu(), F.embedding(idx, w))
    assert torch.equal(F.embedding(idx[0, 0].to("spyre"), w.to("spyre")).cpu(), w[idx[0, 0]])
    assert torch_spyre.fallback_counts() == {}


def test_embedding_of_unaligned_rows(fallback_reset):
    # 20-byte rows: not whole sticks, so index_select's element gather (Indexing.cpp)
    w = make((10, 5), torch.float32)
    idx = torch.tensor([[1, 9], [0, 0]])
    assert torch.equal(F.embedding(idx.to("spyre"), w.to("spyre")).cpu(), F.embedding(idx, w))
    assert torch_spyre.fallback_counts() == {}


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_index_select_rows(fallback_reset, dtype):
    x = make((20, 4, 32), dtype)  # rows of 128 elements: whole sticks for every dtype
    idx = torch.tensor([19, 0, 3, 3, 7])
    d = x.to("spyre")
    assert torch.equal(torch.index_select(d, 0, idx.to("spyre")).cpu(), x.index_select(0, idx))
    assert torch.equal(d.index_select(-3, idx.int().to("spyre")).cpu(), x.index_select(0, idx))
    assert torch.equal(d.index_select(0, torch.tensor(4).to("spyre")).cpu(),
                       x.index_select(0, torch.tensor(4)))
    assert torch.equal(d.index_select(0, idx[:0].to("spyre")).cpu(), x.index_select(0, idx[:0]))
    assert torch_spyre.fallback_counts() == {}


def test_index_select_other_dims(fallback_reset):
    x = make((6, 40), torch.float32)
    idx = torch.tensor([5, 1])
    assert torch.equal(x.to("spyre").index_select(1, idx.to("spyre")).cpu(), x.index_select(1, idx))
    assert torch.equal(x.to("spyre").t().index_select(0, idx.to("spyre")).cpu(),
                       x.t().index_select(0, idx))
    assert torch_spyre.fallback_counts() == {}  # element gathers (Indexing.cpp)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_cat_and_stack(fallback_reset, dtype):
    a, b, c = make((2, 3, 5), dtype), make((2, 4, 5), dtype, 1), make((2, 1, 5), dtype, 2)
    da, db, dc = a.to("spyre"), b.to("spyre"), c.to("spyre")
    assert torch.equal(torch.cat([da, db, dc], 1).cpu(), torch.cat([a, b, c], 1))
    assert torch.equal(torch.cat([da, da], -1).cpu(), torch.cat([a, a], -1))
    assert torch.equal(torch.cat([da.transpose(0, 2), da.transpose(0, 2)], 0).cpu(),
                       torch.cat([a.transpose(0, 2), a.transpose(0, 2)], 0))
    assert torch.equal(torch.stack([da, da], 1).cpu(), torch.stack([a, a], 1))
    e = torch.empty(0, dtype=dtype)
    assert torch.equal(torch.cat([e.to("spyre"), da], 0).cpu(), torch.cat([e, a], 0))
    out = torch.empty(0, dtype=dtype, device="spyre")
    torch.cat([da, da], 0, out=out)
    assert torch.equal(out.cpu(), torch.cat([a, a], 0))
    assert torch_spyre.fallback_counts() == {}


def test_cat_of_mixed_dtypes_falls_back(fallback_reset):
    a, b = make((2, 3), torch.float16), make((2, 3), torch.float32)
    assert torch.equal(torch.cat([a.to("spyre"), b.to("spyre")]).cpu(), torch.cat([a, b]))
    assert "aten::cat.out" in torch_spyre.fallback_counts()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2), (0, 1.5)])
def test_baddbmm(fallback_reset, dtype, beta, alpha):
    s, b1, b2 = make((1, 9, 20), dtype), make((3, 9, 40), dtype, 1), make((3, 40, 20), dtype, 2)
    if beta == 0:
        s = torch.full((1, 9, 20), float("nan"), dtype=dtype)  # not read when beta is 0
    r = torch.baddbmm(s.to("spyre"), b1.to("spyre"), b2.to("spyre"), beta=beta, alpha=alpha)
    ref = torch.baddbmm(s.float(), b1.float(), b2.float(), beta=beta, alpha=alpha).to(dtype)
    close(r.cpu(), ref, dtype, scale=12)
    assert torch_spyre.fallback_counts() == {}


def sdpa_grads(q, k, v, dout, **kw):
    """SDPA's output and the gradients of q, k and v for the output gradient dout."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, **kw)
    out.backward(dout)
    return out, q.grad, k.grad, v.grad


def sdpa_grads_match_cpu(dtype, shape, mask, kw):
    """SDPA's output and q/k/v gradients on the card within dtype tolerance of the CPU's in
    fp32, for q [b, hq, L, d] and k, v [b, hkv, L, d]; the ops the card ran."""
    b, hq, hkv, L, d = shape
    q, k, v = make((b, hq, L, d), dtype), make((b, hkv, L, d), dtype, 1), \
        make((b, hkv, L, d), dtype, 2)
    dout = make((b, hq, L, d), dtype, 3)
    ref_mask = None if mask is None else mask if mask.dtype == torch.bool else mask.float()
    ref = sdpa_grads(q.float(), k.float(), v.float(), dout.float(), attn_mask=ref_mask, **kw)
    dev = [t.to("spyre") for t in (q, k, v, dout)]
    with torch_spyre.profiler.profile() as prof:
        got = sdpa_grads(*dev, attn_mask=None if mask is None else mask.to("spyre"), **kw)
    for name, g, r in zip(["out", "dq", "dk", "dv"], got, ref):
        assert g.device.type == "spyre" and g.shape == r.shape and g.dtype == dtype, name
        close(g.cpu(), r.to(dtype), dtype, scale=2)
    return {e.aten_op for e in prof.events}


# the math decomposition's kernels: none of them may run when the fused kernels are chosen
MATH_OPS = {"aten::_softmax", "aten::bmm", "aten::_softmax_backward_data", "aten::matmul"}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", ["plain", "causal", "gqa", "odd", "additive", "bool"])
def test_sdpa_backward_runs_the_flash_kernels(strict, dtype, case):
    # odd: 37 positions (not a stick multiple: one query block of all rows) and head dim 128
    b, hq, hkv, L, d = 2, 4, 4, 64, 64
    kw, mask = {}, None
    if case == "causal":
        kw["is_causal"] = True
    elif case == "gqa":
        hq, hkv, kw = 8, 2, {"enable_gqa": True, "is_causal": True}
    elif case == "odd":
        L, d = 37, 128
    elif case == "additive":
        mask = make((b, 1, L, L), torch.float32, 4).to(dtype)
    elif case == "bool":
        mask = make((L, L), torch.float32, 4) > -0.5
        mask[:, 0] = True  # every query sees a key
    ops = sdpa_grads_match_cpu(dtype, (b, hq, hkv, L, d), mask, kw)
    assert "aten::_scaled_dot_product_fused_attention_overrideable_backward" in ops, ops
    assert "aten::scaled_dot_product_attention" in ops, ops
    assert not ops & MATH_OPS, ops


def test_sdpa_backward_of_projected_heads_in_a_decoder_layer(strict):
    # a Granite-style layer (GQA 4:2, rotary, causal prefill of 40 tokens): every parameter's
    # gradient against the CPU, the attention's through the flash backward
    from models import GraniteDecoderLayer
    torch.manual_seed(0)
    layer = GraniteDecoderLayer(256, 4, 2, 256, 64)
    x = make((1, 40, 256), torch.float32, 5)
    layer(x, 0).square().mean().backward()
    dev_layer = GraniteDecoderLayer(256, 4, 2, 256, 64)
    dev_layer.load_state_dict(layer.state_dict())
    dev_layer = dev_layer.to("spyre")
    with torch_spyre.profiler.profile() as prof:
        dev_layer(x.to("spyre"), 0).square().mean().backward()
    for (name, p), dp in zip(layer.named_parameters(), dev_layer.parameters()):
        close(dp.grad.cpu(), p.grad, torch.float32, scale=float(p.grad.abs().max()))
    ops = {e.aten_op for e in prof.events}
    assert "aten::_scaled_dot_product_fused_attention_overrideable_backward" in ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("case", ["causal", "gqa_bool", "additive"])
def test_sdpa_backward_of_shapes_the_library_refuses_takes_the_math_path_on_the_card(
        strict, dtype, case):
    # head dims of 1024 / 2048 elements: no block fits the scratchpad, so the fused op (which
    # sdp_choice took) computes its forward, logsumexp and backward by the math path's ops on
    # the card instead of raising
    b, hq, hkv, L, d = 1, 2, 2, 48, 1024 if dtype == torch.float32 else 2048
    kw, mask = {}, None
    if case == "causal":
        kw["is_causal"] = True
    elif case == "gqa_bool":
        hq, kw = 4, {"enable_gqa": True}
        mask = make((L, L), torch.float32, 4) > -0.5
        mask[:, 0] = True
    else:
        b, mask = 2, make((2, 1, L, L), torch.float32, 4).to(dtype)
    ops = sdpa_grads_match_cpu(dtype, (b, hq, hkv, L, d), mask, kw)
    # the fused op's own math (logsumexp, exp, bmm), not torch's decomposition (softmax)
    assert "aten::bmm" in ops and "aten::_softmax" not in ops, ops


def promised(t):
    """The fused op's layout, as its meta kernel (torch_spyre/_dynamo.py) tells the compiler:
    a [B, L, H, D] block seen as [B, H, L, D]."""
    return t.transpose(1, 2).is_contiguous()


@pytest.mark.parametrize("case", ["no_grad", "grad", "backward"])
def test_sdpa_math_path_keeps_the_layout_of_the_meta_kernel(fallback_reset, case):
    # head dim 16 in fp32 (64-byte rows) and a boolean mask: the library refuses, the fused op
    # computes by the math path; compiled code indexes the results by the meta kernel's strides
    q, k, v = (make((1, 4, 5, 16), torch.float32, s) for s in range(3))
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    dev = [t.to("spyre").requires_grad_(case != "no_grad") for t in (q, k, v)]
    fwd = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
    with torch.set_grad_enabled(case != "no_grad"):
        out = fwd(*dev, mask.to("spyre"))[0]
    assert promised(out), out.stride()
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    close(out.detach().cpu(), ref, torch.float32)
    if case == "backward":
        dout = make((1, 4, 5, 16), torch.float32, 3)
        grads = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
            dout.to("spyre"), *(t.detach() for t in dev), mask.to("spyre"),
            [True, True, True, False], out.detach(), torch.empty(0, device="spyre"), None, None,
            5, 5, 0.0, False, torch.empty(0), torch.empty(0))
        qs = [t.clone().requires_grad_() for t in (q, k, v)]
        F.scaled_dot_product_attention(*qs, attn_mask=mask).backward(dout)
        for g, r in zip(grads[:3], qs):
            assert promised(g), g.stride()
            close(g.cpu(), r.grad, torch.float32)
    assert torch_spyre.fallback_counts() == {}


def test_compiled_attention_of_a_layout_the_library_refuses(fallback_reset):
    # the decoder of the fallback census under torch.compile: attention over a slice of a KV
    # cache with a boolean causal mask, head dim 16 fp32; its output read back through
    # transpose + reshape (a view by the meta kernel's strides). The math path's dense output
    # made the compiled logits wrong before it kept the promised layout.
    def attend(q, cache, n):
        keys = cache[:, :, :n]
        pos = torch.arange(n, device=q.device)
        mask = pos[None, :] <= pos[:, None]
        a = F.scaled_dot_product_attention(q, keys, keys, attn_mask=mask)
        return a.transpose(1, 2).reshape(q.shape[0], n, -1) * 2.0

    from torch_spyre._inductor import runtime

    torch.compiler.reset()
    q, cache = make((1, 4, 5, 16), torch.float32), make((1, 4, 32, 16), torch.float32, 1)
    before = runtime.RELAYOUTS["copies"]
    with torch.no_grad():
        got = torch.compile(attend)(q.to("spyre"), cache.to("spyre"), 5)
    close(got.cpu(), attend(q, cache, 5), torch.float32)
    # the result came in the promised layout: no copy into it (runtime.in_layout)
    assert runtime.RELAYOUTS["copies"] == before
    torch.compiler.reset()


def test_sdpa_with_a_mask_that_wants_a_gradient_keeps_the_math_path(fallback_reset):
    q, k, v = (make((1, 2, 8, 64), torch.float32, s) for s in range(3))
    mask = make((8, 8), torch.float32, 4)
    ref = [t.detach().requires_grad_() for t in (q, k, v, mask)]
    F.scaled_dot_product_attention(*ref[:3], attn_mask=ref[3]).sum().backward()
    dev = [t.to("spyre").requires_grad_() for t in (q, k, v, mask)]
    with torch_spyre.profiler.profile() as prof:
        F.scaled_dot_product_attention(*dev[:3], attn_mask=dev[3]).sum().backward()
    for g, r in zip(dev, ref):
        close(g.grad.cpu(), r.grad, torch.float32)
    ops = {e.aten_op for e in prof.events}
    assert "aten::_scaled_dot_product_fused_attention_overrideable_backward" not in ops
    assert torch_spyre.fallback_counts() == {}


def test_sdpa_backward_under_torch_compile(strict):
    # a compiled training step: the compiled forward runs under no_grad, so the fused kernel
    # returns no logsumexp (as its meta says) and the flash backward recomputes it
    def loss(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).square().sum()

    torch.compiler.reset()
    q, k, v = make((1, 4, 40, 64), torch.float32), make((1, 2, 40, 64), torch.float32, 1), \
        make((1, 2, 40, 64), torch.float32, 2)
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    loss(*ref).backward()
    dev = [t.to("spyre").requires_grad_() for t in (q, k, v)]
    with torch_spyre.profiler.profile() as prof:
        torch.compile(loss)(*dev).backward()
    for d, r in zip(dev, ref):
        close(d.grad.cpu(), r.grad, torch.float32, scale=float(r.grad.abs().max()))
    ops = {e.aten_op for e in prof.events}
    assert "aten::_scaled_dot_product_fused_attention_overrideable_backward" in ops, ops
    torch.compiler.reset()
