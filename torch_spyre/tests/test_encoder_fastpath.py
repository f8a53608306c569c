"""nn.TransformerEncoderLayer's and nn.MultiheadAttention's eval fast paths
(`_transformer_encoder_layer_fwd`, `_native_multi_head_attention`) on the card with
TORCH_SPYRE_STRICT=1, against the same modules' fast paths on the CPU: norm_first, relu and
gelu, key padding masks (a batch row fully padded: torch's masked softmax gives its queries NaN
probabilities on the CPU, and so does the card), attention masks and both together, batch_first
or not (torch takes the fast path only with batch_first; the other layout checks its composite
path on the card), fp32/fp16/bf16, the attention weights (averaged or per head)."""

import copy

import pytest
import torch
from torch import nn

from conftest import FLOATS, tol

B, L, D, H = 3, 10, 64, 4


def padding(kind):
    """A [B, L] key padding mask (True = padded): none, some tails, or a whole batch row."""
    if kind == "none":
        return None
    pad = torch.zeros(B, L, dtype=torch.bool)
    pad[1, 7:] = True
    pad[2, 4:] = True
    if kind == "full_row":
        pad[2] = True
    return pad


def pair(module, dtype):
    """The module in dtype on the card and its CPU reference in fp32 from the same rounded
    weights."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():  # bigger weights: attention that is not uniform
            p.uniform_(-0.3, 0.3)
    module = module.to(dtype).eval()
    return copy.deepcopy(module).to("spyre"), module.float()


def compare(got, want, dtype):
    assert got.device.type == "cpu" and got.shape == want.shape, (got.shape, want.shape)
    assert torch.equal(got.isnan(), want.isnan())  # a fully padded sequence: NaN on both
    torch.testing.assert_close(got.float(), want, rtol=tol(dtype), atol=tol(dtype) * 4,
                               equal_nan=True)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("pad", ["none", "tails", "full_row"])
def test_encoder_layer(strict, norm_first, activation, pad):
    batch_first = pad != "tails"  # both layouts, over the grid
    dev, ref = pair(nn.TransformerEncoderLayer(D, H, dim_feedforward=96, activation=activation,
                                               norm_first=norm_first, batch_first=batch_first),
                    torch.float32)
    x = torch.randn(B, L, D)
    mask = padding(pad)
    if not batch_first:
        x = x.transpose(0, 1).contiguous()
    with torch.no_grad():
        want = ref(x, src_key_padding_mask=mask)
        got = dev(x.to("spyre"),
                  src_key_padding_mask=None if mask is None else mask.to("spyre"))
    compare(got.cpu(), want, torch.float32)


@pytest.mark.parametrize("dtype", FLOATS)
def test_encoder_layer_16_bit_and_float_mask(strict, dtype):
    """16-bit layers, and an additive float padding mask (-inf where padded): the fast path
    removes every key whose mask is nonzero."""
    dev, ref = pair(nn.TransformerEncoderLayer(D, H, dim_feedforward=96, activation="gelu",
                                               batch_first=True), dtype)
    x = torch.randn(B, L, D).to(dtype)
    mask = torch.zeros(B, L).masked_fill(padding("full_row"), float("-inf"))
    with torch.no_grad():
        want = ref(x.float(), src_key_padding_mask=mask)
        got = dev(x.to("spyre"), src_key_padding_mask=mask.to(dtype).to("spyre"))
    assert got.dtype == dtype
    compare(got.cpu(), want, dtype)


def test_encoder_layer_with_causal_and_padding_masks(strict):
    """src_mask and src_key_padding_mask together: merged into one [B, H, L, L] mask."""
    dev, ref = pair(nn.TransformerEncoderLayer(D, H, dim_feedforward=96, batch_first=True),
                    torch.float32)
    x = torch.randn(B, L, D)
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)  # True: not attended
    with torch.no_grad():
        want = ref(x, src_mask=causal, src_key_padding_mask=padding("tails"))
        got = dev(x.to("spyre"), src_mask=causal.to("spyre"),
                  src_key_padding_mask=padding("tails").to("spyre"))
    compare(got.cpu(), want, torch.float32)


def test_encoder_stack(strict):
    """Two layers in nn.TransformerEncoder (as the fallback census runs them)."""
    layer = nn.TransformerEncoderLayer(D, H, dim_feedforward=96, batch_first=True)
    dev, ref = pair(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), torch.float32)
    x, pad = torch.randn(B, L, D), padding("tails")
    with torch.no_grad():
        want = ref(x, src_key_padding_mask=pad)
        got = dev(x.to("spyre"), src_key_padding_mask=pad.to("spyre"))
    compare(got.cpu(), want, torch.float32)


@pytest.mark.parametrize("average", [False, True])
@pytest.mark.parametrize("masks", ["padding", "attn", "both"])
def test_multi_head_attention_weights(strict, average, masks):
    dev, ref = pair(nn.MultiheadAttention(D, H, batch_first=True), torch.float32)
    x = torch.randn(B, L, D)
    pad = padding("full_row") if masks != "attn" else None
    attn = torch.rand(L, L) < 0.3 if masks != "padding" else None
    on = (lambda m: None if m is None else m.to("spyre"))
    with torch.no_grad():
        want_out, want_w = ref(x, x, x, key_padding_mask=pad, attn_mask=attn,
                               need_weights=True, average_attn_weights=average)
        xs = x.to("spyre")
        got_out, got_w = dev(xs, xs, xs, key_padding_mask=on(pad), attn_mask=on(attn),
                             need_weights=True, average_attn_weights=average)
        no_w_out, no_w = dev(xs, xs, xs, key_padding_mask=on(pad), attn_mask=on(attn),
                             need_weights=False)
    compare(got_out.cpu(), want_out, torch.float32)
    compare(got_w.cpu(), want_w, torch.float32)
    assert no_w is None
    compare(no_w_out.cpu(), want_out, torch.float32)


def test_empty_batch(strict):
    dev, ref = pair(nn.TransformerEncoderLayer(D, H, dim_feedforward=96, batch_first=True),
                    torch.float32)
    x = torch.randn(0, L, D)
    with torch.no_grad():
        got = dev(x.to("spyre"))
    assert got.shape == (0, L, D)


# nn.TransformerEncoder's nested-tensor path (enable_nested_tensor, the default): with a key
# padding mask it packs the input into a nested tensor, runs the layers on it and pads the
# result with zeros, on the CPU and on the card alike.
def encoder(norm=True):
    layer = nn.TransformerEncoderLayer(D, H, dim_feedforward=96, batch_first=True)
    return nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(D) if norm else None)


@pytest.mark.parametrize("pad", ["tails", "full_row"])
@pytest.mark.parametrize("norm", [False, True])
def test_encoder_nested_path(strict, pad, norm):
    dev, ref = pair(encoder(norm), torch.float32)
    x, mask = torch.randn(B, L, D), padding(pad)
    with torch.no_grad():
        want = ref(x, src_key_padding_mask=mask)
        got = dev(x.to("spyre"), src_key_padding_mask=mask.to("spyre"))
    got = got.cpu()
    if not norm:  # the nested path's mark: padded positions come out exactly 0 (here and on the CPU)
        assert torch.equal(want[mask], torch.zeros_like(want[mask]))
        assert torch.equal(got[mask], torch.zeros_like(got[mask]))
    compare(got, want, torch.float32)


@pytest.mark.parametrize("dtype", FLOATS[1:])
def test_encoder_nested_path_16_bit(strict, dtype):
    dev, ref = pair(encoder(), dtype)
    x, mask = torch.randn(B, L, D).to(dtype), padding("tails")
    with torch.no_grad():
        want = ref(x.float(), src_key_padding_mask=mask)
        got = dev(x.to("spyre"), src_key_padding_mask=mask.to("spyre"))
    assert got.dtype == dtype
    compare(got.cpu(), want, dtype)


def test_encoder_mask_not_left_aligned_takes_the_dense_path(strict):
    """A mask with padding before tokens fails the encoder's left-alignment check (a card
    kernel here): both devices run the layers densely, padded positions are computed."""
    dev, ref = pair(encoder(norm=False), torch.float32)
    x, mask = torch.randn(B, L, D), padding("tails")
    mask[0, 0] = True
    with torch.no_grad():
        want = ref(x, src_key_padding_mask=mask)
        got = dev(x.to("spyre"), src_key_padding_mask=mask.to("spyre"))
    assert not torch.equal(want[0, 0], torch.zeros(D))
    compare(got.cpu(), want, torch.float32)


def test_encoder_nested_path_empty_batch_is_refused_as_on_the_cpu(strict):
    dev, ref = pair(encoder(), torch.float32)
    x, mask = torch.randn(0, L, D), torch.zeros(0, L, dtype=torch.bool)
    with torch.no_grad():
        with pytest.raises(RuntimeError):
            ref(x, src_key_padding_mask=mask)
        with pytest.raises(RuntimeError, match="empty batch"):
            dev(x.to("spyre"), src_key_padding_mask=mask.to("spyre"))


def test_nested_tensor_from_mask_and_to_padded_tensor(strict):
    t = torch.randn(B, L, D)
    keep = padding("full_row").logical_not()
    nt = torch._nested_tensor_from_mask(t.to("spyre"), keep.to("spyre"))
    want = torch._nested_tensor_from_mask(t, keep)
    assert nt.is_nested and nt.device.type == "spyre"
    parts = nt.unbind()
    assert len(parts) == B and all(p.device.type == "spyre" for p in parts)
    assert all(torch.equal(p.cpu(), w) for p, w in zip(parts, want.unbind()))
    assert torch.equal(nt.to_padded_tensor(-1.0).cpu(), want.to_padded_tensor(-1.0))
    assert torch.equal(nt.to_padded_tensor(2.5, (B, L + 3, D)).cpu(),
                       want.to_padded_tensor(2.5, (B, L + 3, D)))
    assert torch._nested_tensor_from_mask_left_aligned(t.to("spyre"), keep.to("spyre"))
    with pytest.raises(RuntimeError, match="Truncation"):
        nt.to_padded_tensor(0.0, (B, 2, D))


def test_nested_tensor_from_mask_refuses_bad_masks(strict):
    t = torch.randn(B, L, D).to("spyre")
    keep = padding("tails").logical_not()
    keep[1, 0] = False  # a hole before the tokens
    assert not torch._nested_tensor_from_mask_left_aligned(t, keep.to("spyre"))
    with pytest.raises(RuntimeError, match="left-aligned"):
        torch._nested_tensor_from_mask(t, keep.to("spyre"))
    with pytest.raises(RuntimeError, match="Bool"):
        torch._nested_tensor_from_mask(t, keep.float().to("spyre"))
    with pytest.raises(RuntimeError, match="does not match"):
        torch._nested_tensor_from_mask(t, keep[:, :4].to("spyre"))
