"""Model blocks with deterministic random weights on spyre against the same module on the CPU:
a Granite-style decoder (RMSNorm, GQA attention with rotary embedding and a KV cache, SwiGLU)
for a prefill and 8 greedy decode steps with identical tokens, a BERT-style encoder layer, and
a generic torch.nn model moved with .to("spyre"). The decoder and the encoder run under
TORCH_SPYRE_STRICT=1 with no CPU fallback."""

import copy

import pytest
import torch
from torch import nn

import torch_spyre
from conftest import close, make
from models import BertEncoderLayer, TinyGranite


def test_decoder_prefill_and_greedy_decode(strict):
    cpu = TinyGranite()
    dev = copy.deepcopy(cpu).to("spyre")
    prompt = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(3))
    ref_tokens, ref_logits = cpu.generate(prompt, 8)
    tokens, logits = dev.generate(prompt.to("spyre"), 8)
    assert tokens.device.type == "spyre"
    assert torch.equal(tokens.cpu(), ref_tokens), (tokens.cpu(), ref_tokens)
    for got, want in zip(logits, ref_logits):
        close(got.cpu(), want, torch.float32, scale=10)
    # the KV caches hold the same keys and values
    close(dev.layer.k_cache.cpu(), cpu.layer.k_cache, torch.float32, scale=10)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_decoder_prefill_in_16_bit(strict, dtype):
    cpu = TinyGranite(seed=1)
    dev = copy.deepcopy(cpu).to(dtype).to("spyre")
    prompt = torch.randint(0, 512, (1, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref = cpu(prompt, 0)
        got = dev(prompt.to("spyre"), 0).cpu()
    assert got.dtype == dtype
    # 16-bit weights and activations against the fp32 model: relative to the logit scale
    err = (got.float() - ref).abs().max() / ref.abs().max()
    assert err < (0.03 if dtype == torch.float16 else 0.1), float(err)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_bert_encoder_layer(strict, dtype):
    cpu = BertEncoderLayer()
    dev = copy.deepcopy(cpu).to(dtype).to("spyre")
    x = make((2, 24, 256), torch.float32)
    with torch.no_grad():
        ref = cpu(x)
        got = dev(x.to(dtype).to("spyre")).cpu()
    close(got.float(), ref, dtype, scale=20 if dtype == torch.float16 else 4)


def test_bert_encoder_layer_with_a_padding_mask(fallback_reset):
    cpu = BertEncoderLayer(seed=2)
    dev = copy.deepcopy(cpu).to("spyre")
    x = make((2, 16, 256), torch.float32)
    mask = torch.zeros(2, 1, 1, 16)
    mask[1, :, :, 11:] = float("-inf")  # the second sequence has 11 tokens
    with torch.no_grad():
        ref = cpu(x, mask)
        got = dev(x.to("spyre"), mask.to("spyre")).cpu()
    close(got, ref, torch.float32, scale=4)


def test_any_nn_model_moved_to_spyre(fallback_reset):
    torch.manual_seed(5)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * 4 * 4, 64), nn.LayerNorm(64), nn.GELU(), nn.Dropout(0.1),
        nn.Linear(64, 10), nn.LogSoftmax(-1)).eval()
    x = make((4, 3, 8, 8), torch.float32)
    with torch.no_grad():
        ref = model(x)
        dev = copy.deepcopy(model).to("spyre")
        got = dev(x.to("spyre"))
    assert got.device.type == "spyre"
    close(got.cpu(), ref, torch.float32, scale=4)
    counts = torch_spyre.fallback_counts()
    assert counts == {}, counts  # conv, batch norm, pooling, linear, norms all on the card
    # a training step's gradients through the convolution's backward on the fallback
    conv = nn.Conv2d(3, 4, 3)
    dconv = copy.deepcopy(conv).to("spyre")
    conv(x).square().mean().backward()
    dconv(x.to("spyre")).square().mean().backward()
    close(dconv.weight.grad.cpu(), conv.weight.grad, torch.float32)
    close(dconv.bias.grad.cpu(), conv.bias.grad, torch.float32)
