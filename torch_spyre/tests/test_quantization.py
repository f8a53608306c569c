"""Weight-only int8 linears (torch_spyre.quantization): the quantized weights made on the card
equal the CPU's bit for bit, the modules' outputs match the CPU's on the same weights, a
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
    got, ops, _ = profiled_launches(q_dev, x.to("spyre"))
    assert "aten::_weight_int8pack_mm" in ops, ops
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
