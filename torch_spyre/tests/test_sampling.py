"""multinomial on the card (cumulative sums, uniform draws from the spyre generator, a count)
with no fallback: shapes and ranges, categories of probability 0 never drawn, the frequencies
of many draws with replacement within 5 sigma of the probabilities, unnormalized weights,
fp16/bf16 probabilities, reproducibility for a seed, the decoder's top-k sampling step, several
draws without replacement (the exponential race); invalid distributions and more draws than
categories without replacement go to the CPU fallback (the CPU's errors)."""

import pytest
import torch

import torch_spyre


@pytest.fixture
def no_fallback(fallback_reset):
    yield
    assert torch_spyre.fallback_counts() == {}


def test_shapes_ranges_and_zero_probabilities(no_fallback):
    p = torch.tensor([[0.0, 0.3, 0.0, 0.7, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0],
                      [0.0, 0.0, 0.0, 0.0, 2.0]])
    d = p.to("spyre")
    for _ in range(20):
        s = torch.multinomial(d, 1).cpu()
        assert s.shape == (3, 1) and s.dtype == torch.int64
        assert s[0, 0] in (1, 3) and s[1, 0] == 0 and s[2, 0] == 4
    v = torch.multinomial(d[0], 1).cpu()
    assert v.shape == (1,) and v[0] in (1, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_frequencies_with_replacement(no_fallback, dtype):
    p = torch.tensor([0.1, 0.2, 0.0, 0.45, 0.25])
    n = 4000
    torch.manual_seed(1)
    s = torch.multinomial((p * 3).to(dtype).to("spyre"), n, replacement=True).cpu()
    assert s.shape == (n,)
    counts = torch.bincount(s, minlength=5).double()
    want = p.double() * n
    sigma = (n * p.double() * (1 - p.double())).sqrt()
    assert counts[2] == 0
    assert ((counts - want).abs() <= 5 * sigma + 1e-9).all(), counts


def test_reproducible_for_a_seed(no_fallback):
    p = torch.rand(4, 50).to("spyre")
    torch.manual_seed(7)
    a = torch.multinomial(p, 3, replacement=True).cpu()
    torch.manual_seed(7)
    b = torch.multinomial(p, 3, replacement=True).cpu()
    assert torch.equal(a, b)


def test_top_k_sampling_step(no_fallback):
    logits = torch.randn(1, 96).to("spyre")
    top_v, top_i = torch.topk(logits, 5, dim=-1)
    probs = torch.softmax(top_v / 0.8, dim=-1)
    drawn = torch.gather(top_i, -1, torch.multinomial(probs, 1))
    assert drawn.shape == (1, 1) and drawn.cpu()[0, 0] in top_i.cpu()[0]


def test_draws_without_replacement(no_fallback):
    """Several draws without replacement (the CPU kernel's exponential race: the n largest
    p / q, q ~ Exponential(1), on the card): distinct categories, never one of probability 0,
    the first draw as likely as its probability, the pair (first, second) as sequential
    sampling gives it, reproducible for a seed."""
    p = torch.tensor([0.1, 0.2, 0.0, 0.45, 0.25])
    rows = 4000
    torch.manual_seed(2)
    s = torch.multinomial(p.expand(rows, 5).contiguous().to("spyre"), 3).cpu()
    assert s.shape == (rows, 3) and s.dtype == torch.int64
    assert (s != 2).all()
    assert all(len(set(r.tolist())) == 3 for r in s)
    p64 = p.double()
    for draws, want in ((s[:, 0], p64),
                        (s[:, 1][s[:, 0] == 3], p64 / (1 - p64[3]) * (torch.arange(5) != 3))):
        n = draws.numel()
        counts = torch.bincount(draws, minlength=5).double()
        sigma = (n * want * (1 - want)).sqrt()
        assert ((counts - n * want).abs() <= 5 * sigma + 1e-9).all(), (counts, n * want)
    torch.manual_seed(3)
    a = torch.multinomial(torch.rand(2, 700).to("spyre"), 50).cpu()
    torch.manual_seed(3)
    assert torch.equal(a, torch.multinomial(torch.rand(2, 700).to("spyre"), 50).cpu())
    one = torch.multinomial(torch.tensor([0.2, 0.3, 0.5]).to("spyre"), 3).cpu()
    assert sorted(one.tolist()) == [0, 1, 2]
    # fewer positive categories than draws: the CPU does not refuse it; the positive one first
    few = torch.multinomial(torch.tensor([0.0, 0.3, 0.0]).to("spyre"), 2).cpu()
    assert few[0] == 1 and few[1] in (0, 2)


def test_invalid_inputs_fall_back_with_the_cpu_errors(fallback_reset):
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor([0.5, -0.1]).to("spyre"), 1)
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.zeros(3).to("spyre"), 1)
    with pytest.raises(RuntimeError):  # more draws than categories without replacement
        torch.multinomial(torch.tensor([0.2, 0.3]).to("spyre"), 3)
    assert set(torch_spyre.fallback_counts()) == {"aten::multinomial"}
