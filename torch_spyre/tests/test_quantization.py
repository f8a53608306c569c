"""Weight-only int8 linears (torch_spyre.quantization): the quantized weights made on the card
equal the CPU's bit for bit, the modules' outputs match the CPU's on the same weights (one op,
spyre::linear_int8_weight, its bias and activation in the epilogue), a
quantized TinyGranite generates the CPU's tokens without a fallback, eager and compiled, and
stays close to the float model."""

import copy

import pytest
import torch
from torch import nn

import torch_spyre
from torch_spyre.quantization import Int8WeightOnlyLinear, quantize_int8_weights
from conftest import profiled_launches
from models import TinyGranite


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_int8_linear_matches_the_cpu(strict, dtype):
    torch.manual_seed(4)
    lin = nn.Linear(200, 90).to(dtype)
    with torch.no_grad():
        lin.weight[3].zero_()  # a zero row keeps scale 1
    q_cpu = Int8WeightOnlyLinear.from_linear(lin)
    q_dev = Int8WeightOnlyLinear.from_linear(copy.deepcopy(lin).to("spyre"))
    assert torch.equal(q_dev.weight.cpu(), q_cpu.weight)  # quantized on the card, same bits
    assert torch.equal(q_dev.scales.cpu(), q_cpu.scales)
    assert q_cpu.weight.abs().max() == 127 and q_cpu.scales[3] == 1
    x = torch.randn(3, 5, 200).to(dtype)
    got, ops, launched = profiled_launches(q_dev, x.to("spyre"))
    # one op, the bias in its epilogue (it was the product, then a separate add of the bias)
    assert ops == ["spyre::linear_int8_weight"], ops
    # the CPU's fp32 kernel on the same values (its bf16 kernel crashes on some shapes here)
    want = Int8WeightOnlyLinear.from_linear(lin.float())(x.float()).to(dtype)
    rel = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(got.cpu(), want, rtol=rel, atol=rel)
    # the quantization error against the float layer: about 1/254 of each row's range
    err = (got.cpu().float() - lin.float()(x.float())).abs().max()
    assert err < 0.05, err


def test_quantized_decoder_generates_the_cpus_tokens(strict):
    cpu = quantize_int8_weights(TinyGranite())
    dev = quantize_int8_weights(TinyGranite().to("spyre"))
    n_q = sum(isinstance(m, Int8WeightOnlyLinear) for m in dev.modules())
    assert n_q == 8  # q, k, v, o, gate, up, down, lm_head
    for (name, a), (_, b) in zip(cpu.named_buffers(), dev.named_buffers()):
        if b.dtype == torch.int8:
            assert torch.equal(a, b.cpu()), name
    prompt = torch.randint(0, 512, (1, 7), generator=torch.Generator().manual_seed(8))
    want_tokens, want_logits = cpu.generate(prompt, 6)
    got_tokens, got_logits = dev.generate(prompt.to("spyre"), 6)
    assert torch.equal(got_tokens.cpu(), want_tokens)
    for g, w in zip(got_logits, want_logits):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-4)
    # close to the float model (the quantization, not the card)
    ref_tokens, ref_logits = TinyGranite().generate(prompt, 6)
    cos = torch.nn.functional.cosine_similarity(want_logits[0], ref_logits[0], dim=-1)
    assert cos.item() > 0.99, cos
    compiled = torch.compile(dev)
    with torch.no_grad():
        got = compiled(prompt.to("spyre"), 0)
    torch.testing.assert_close(got.cpu(), cpu(prompt, 0).detach(), rtol=1e-4, atol=1e-4)


def test_include_picks_the_linears_by_name():
    model = quantize_int8_weights(
        TinyGranite(), include=lambda name: name.endswith("proj") and "o_proj" not in name)
    kinds = {name: type(m).__name__ for name, m in model.named_modules()
             if isinstance(m, (nn.Linear, Int8WeightOnlyLinear))}
    assert kinds["lm_head"] == kinds["layer.o_proj"] == "Linear", kinds
    assert all(v == "Int8WeightOnlyLinear" for k, v in kinds.items()
               if k.endswith("proj") and "o_proj" not in k), kinds


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_linear_int8_weight_op(strict, dtype):
    """torch.ops.spyre.linear_int8_weight on the card against its CPU reference and a float64
    formula: activations, with and without a bias, scales in fp32 or x's type, x of 1 to 3 dims;
    bad operands get torch's errors naming what is expected."""
    g = torch.Generator().manual_seed(12)
    w = torch.randint(-127, 128, (70, 96), generator=g, dtype=torch.int8)
    rel = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    acts = {"none": lambda y: y, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
            "silu": torch.nn.functional.silu}
    for act, f in acts.items():
        for shape in [(96,), (5, 96), (2, 3, 96)]:
            for sdt in [torch.float32, dtype]:
                for with_bias in [False, True]:
                    x = torch.randn(shape, generator=g).to(dtype)
                    sc = (torch.rand(70, generator=g) / 50).to(sdt)
                    b = torch.randn(70, generator=g).to(dtype) if with_bias else None
                    want = torch.ops.spyre.linear_int8_weight(x, w, sc, b, act)
                    args = [t.to("spyre") if t is not None else None for t in (x, w, sc, b)]
                    got, ops, _ = profiled_launches(torch.ops.spyre.linear_int8_weight,
                                                    *args, act)
                    assert ops == ["spyre::linear_int8_weight"], ops
                    assert got.dtype == dtype and got.shape == (*shape[:-1], 70)
                    torch.testing.assert_close(got.cpu(), want, rtol=rel, atol=rel)
                    y = (x.double() @ w.double().t()) * sc.double()
                    if b is not None:
                        y = y + b.double()
                    torch.testing.assert_close(want.double(), f(y), rtol=rel, atol=rel)
    x, sc = torch.randn(4, 96).to("spyre"), torch.ones(70).to("spyre")
    with pytest.raises(RuntimeError, match="weight must be int8"):
        torch.ops.spyre.linear_int8_weight(x, w.float().to("spyre"), sc)
    with pytest.raises(RuntimeError, match="scales must be"):
        torch.ops.spyre.linear_int8_weight(x, w.to("spyre"), torch.ones(69).to("spyre"))
    with pytest.raises(RuntimeError, match="unknown activation"):
        torch.ops.spyre.linear_int8_weight(x, w.to("spyre"), sc, None, "tanh")


def test_gradient_through_a_frozen_int8_linear(strict):
    """A quantized layer inside a trained model (its weight frozen): the gradient reaches x and
    the bias as through the float formula, on the card as on the CPU; without a gradient the
    call is the one fused op."""
    g = torch.Generator().manual_seed(3)
    w = torch.randint(-127, 128, (30, 40), generator=g, dtype=torch.int8)
    sc, b = torch.rand(30, generator=g) / 40, torch.randn(30, generator=g)
    x = torch.randn(6, 40, generator=g)
    grads = []
    for dev in ["cpu", "spyre"]:
        xd = x.detach().to(dev).requires_grad_()
        bd = b.detach().to(dev).requires_grad_()
        y = torch.ops.spyre.linear_int8_weight(xd, w.to(dev), sc.to(dev), bd, "silu")
        (y * y).sum().backward()
        grads.append((xd.grad.cpu(), bd.grad.cpu()))
    xr, br = x.double().requires_grad_(), b.double().requires_grad_()
    y = torch.nn.functional.silu((xr @ w.double().t()) * sc.double() + br)
    (y * y).sum().backward()
    for gx, gb in grads:
        torch.testing.assert_close(gx.double(), xr.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(gb.double(), br.grad, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        _, ops, _ = profiled_launches(torch.ops.spyre.linear_int8_weight, x.to("spyre"),
                                      w.to("spyre"), sc.to("spyre"), b.to("spyre"))
    assert ops == ["spyre::linear_int8_weight"], ops


def test_decode_step_linear_is_one_launch(strict):
    """A decode step's quantized linear (one row) with a bias is one launch on the card; the
    product and a separate bias add were two."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 1024, generator=g).to("spyre")
    w = torch.randint(-127, 128, (512, 1024), generator=g, dtype=torch.int8).to("spyre")
    sc = (torch.rand(512, generator=g) / 100).to("spyre")
    b = torch.randn(512, generator=g).to("spyre")
    for _ in range(2):  # the second call: programs loaded
        fused, ops, launched = profiled_launches(torch.ops.spyre.linear_int8_weight, x, w, sc, b)
        split, _, launched_split = profiled_launches(
            lambda: torch._weight_int8pack_mm(x, w, sc) + b)
    assert launched == 1 and launched_split == 2, (launched, launched_split)
    torch.testing.assert_close(fused.cpu(), split.cpu(), rtol=1e-5, atol=1e-5)
