"""Random numbers on the card: the spyre generator (torch.Generator("spyre"), the default
generator per card, manual_seed/seed/initial_seed, get/set_rng_state, fork_rng, checkpointing)
and the random kernels (uniform_, normal_, bernoulli_, bernoulli, exponential_, native_dropout,
poisson;
rand/randn/rand_like/randn_like/dropout through them). Values are checked against a Python
Philox4x32-10 (the same known-answer vectors as the engine's tests), statistics with fixed seeds
(so deterministic), and every kernel under TORCH_SPYRE_STRICT=1 (no CPU fallback)."""

import math

import pytest
import torch
import torch.nn.functional as F

import torch_spyre


DEV = "spyre"
M32 = 0xFFFFFFFF


def philox(ctr, key):
    """Philox4x32-10 of a 4-word counter and a 2-word key (Salmon et al., SC'11)."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32)
    return c0, c1, c2, c3


def test_philox_known_answers():
    assert philox((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert philox((M32,) * 4, (M32, M32)) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    assert philox((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)) == (
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


def ref_uniform(seed, offset, n):
    """torch.rand(n) in fp32 on spyre for a (seed, offset): element k is the top 24 bits of word
    k % 4 of the block with counter (k / 4, offset), times 2^-24."""
    out = []
    for k in range(n):
        g = k >> 2
        w = philox((g & M32, g >> 32, offset & M32, offset >> 32), (seed & M32, seed >> 32))
        out.append((w[k & 3] >> 8) * 2.0**-24)
    return torch.tensor(out, dtype=torch.float32)


# ---- the generator ----


def test_rand_is_philox_of_seed_and_offset(strict):
    torch.spyre.manual_seed(0x1234_5678_9ABC)
    a = torch.rand(37, device=DEV).cpu()
    b = torch.rand(37, device=DEV).cpu()
    assert torch.equal(a, ref_uniform(0x1234_5678_9ABC, 0, 37))
    assert torch.equal(b, ref_uniform(0x1234_5678_9ABC, 1, 37))  # one offset per launch


def test_reproducible_and_seeds_differ(strict):
    torch.spyre.manual_seed(3)
    a = torch.randn(1000, device=DEV).cpu()
    torch.spyre.manual_seed(3)
    b = torch.randn(1000, device=DEV).cpu()
    torch.spyre.manual_seed(4)
    c = torch.randn(1000, device=DEV).cpu()
    assert torch.equal(a, b)
    assert (a != c).sum() > 990
    # a larger tensor (other cores and chunks) starts with the same values
    torch.spyre.manual_seed(3)
    big = torch.randn(200_001, device=DEV).cpu()
    assert torch.equal(big[:1000], a)


def test_torch_manual_seed_seeds_every_card(strict):
    torch.manual_seed(77)
    assert torch.spyre.initial_seed() == 77
    with torch.spyre.device(1):
        assert torch.spyre.initial_seed() == 77
    a = torch.rand(50, device="spyre:1").cpu()
    torch.spyre.manual_seed_all(77)
    assert torch.equal(torch.rand(50, device="spyre:1").cpu(), a)
    assert torch.equal(a, ref_uniform(77, 0, 50))
    torch.manual_seed(-1)  # negative seeds wrap as for the CPU generator
    assert torch.spyre.initial_seed() == torch.initial_seed()


def test_seed_is_random_and_sticks():
    torch.spyre.seed()
    s1 = torch.spyre.initial_seed()
    torch.spyre.seed()
    s2 = torch.spyre.initial_seed()
    assert s1 != s2
    torch.spyre.seed_all()
    seed1 = int.from_bytes(bytes(torch.spyre.get_rng_state(1)[:8].tolist()), "little")
    assert torch.spyre.initial_seed() == seed1


def test_rng_state_round_trip_and_layout(strict):
    torch.spyre.manual_seed(0x0102030405060708)
    torch.rand(5, device=DEV)
    st = torch.spyre.get_rng_state()
    assert st.dtype == torch.uint8 and st.shape == (16,) and st.device.type == "cpu"
    assert st[:8].tolist() == [8, 7, 6, 5, 4, 3, 2, 1]  # seed, little endian
    assert st[8:].tolist() == [1, 0, 0, 0, 0, 0, 0, 0]  # offset after one launch
    a = torch.randn(300, device=DEV).cpu()
    torch.spyre.set_rng_state(st)
    assert torch.equal(torch.randn(300, device=DEV).cpu(), a)
    # per-card states are independent
    s0, s1 = torch.spyre.get_rng_state_all()
    torch.rand(3, device="spyre:1")
    assert torch.equal(torch.spyre.get_rng_state(0), torch.spyre.get_rng_state())
    assert not torch.equal(torch.spyre.get_rng_state(1), s1)
    torch.spyre.set_rng_state_all([s0, s1])
    assert torch.equal(torch.spyre.get_rng_state(1), s1)


def test_bad_rng_states_are_clear_errors():
    good = torch.spyre.get_rng_state()
    with pytest.raises(ValueError, match="16 bytes"):
        torch.spyre.set_rng_state(torch.zeros(15, dtype=torch.uint8))
    with pytest.raises(TypeError, match="ByteTensor"):
        torch.spyre.set_rng_state(torch.zeros(16, dtype=torch.float32))
    with pytest.raises(TypeError):
        torch.spyre.set_rng_state([0] * 16)
    g = torch.Generator(device=DEV)
    with pytest.raises(ValueError, match="16 bytes"):
        g.set_state(torch.zeros(8, dtype=torch.uint8))
    with pytest.raises(TypeError, match="ByteTensor"):
        g.set_state(torch.zeros(16, dtype=torch.int32))
    assert torch.equal(torch.spyre.get_rng_state(), good)  # nothing changed


def test_generator_objects(strict):
    g = torch.Generator(device=DEV)
    assert g.device.type == "spyre"
    g.manual_seed(11)
    default_before = torch.spyre.get_rng_state()
    a = torch.rand(64, device=DEV, generator=g).cpu()
    assert torch.equal(a, ref_uniform(11, 0, 64))
    assert torch.equal(torch.spyre.get_rng_state(), default_before)  # default untouched
    st = g.get_state()
    b = torch.randn(64, device=DEV, generator=g).cpu()
    g.set_state(st)
    assert torch.equal(torch.randn(64, device=DEV, generator=g).cpu(), b)
    assert g.initial_seed() == 11
    g2 = torch.Generator(device=DEV).manual_seed(11)
    assert torch.equal(torch.rand(64, device=DEV, generator=g2).cpu(), a)
    x = torch.empty(64, device=DEV)
    x.normal_(generator=g2)
    assert g2.get_offset() == 2  # one offset per launch


def test_fork_rng_restores(strict):
    torch.spyre.manual_seed(5)
    want = torch.rand(100, device=DEV).cpu()
    torch.spyre.manual_seed(5)
    with torch.random.fork_rng(device_type="spyre", devices=[0]):
        torch.spyre.manual_seed(999)
        inside = torch.rand(100, device=DEV).cpu()
    assert not torch.equal(inside, want)
    assert torch.equal(torch.rand(100, device=DEV).cpu(), want)


def test_activation_checkpointing_replays_dropout():
    from torch.utils.checkpoint import checkpoint

    lin = torch.nn.Linear(16, 16).to(DEV)

    def block(x):
        return F.dropout(lin(x), p=0.5, training=True)

    x0 = torch.randn(8, 16)
    torch.spyre.manual_seed(21)
    x = x0.to(DEV).requires_grad_()
    y = block(x)
    y.sum().backward()
    g_plain = x.grad.cpu()
    torch.spyre.manual_seed(21)
    xc = x0.to(DEV).requires_grad_()
    yc = checkpoint(block, xc, use_reentrant=False)
    yc.sum().backward()
    assert torch.equal(yc.detach().cpu(), y.detach().cpu())
    assert torch.equal(xc.grad.cpu(), g_plain)


# ---- the kernels ----

N = 100_000


def ks_statistic(samples, cdf):
    """Kolmogorov-Smirnov distance between the samples' empirical CDF and cdf."""
    x, _ = torch.sort(samples.double())
    n = x.numel()
    f = cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return max((i / n - f).max().item(), (f - (i - 1) / n).max().item())


KS_CRIT = 1.63 / math.sqrt(N)  # 1% level


def test_uniform_statistics(strict):
    torch.spyre.manual_seed(2024)
    u = torch.rand(N, device=DEV).cpu()
    assert 0 <= u.min() and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.005
    assert abs(u.var().item() - 1 / 12) < 0.002
    assert ks_statistic(u, lambda x: x) < KS_CRIT
    v = torch.empty(N, device=DEV).uniform_(-2, 5).cpu()
    assert -2 <= v.min() and v.max() < 5
    assert abs(v.mean().item() - 1.5) < 0.05
    assert ks_statistic(v, lambda x: (x + 2) / 7) < KS_CRIT


def test_normal_statistics(strict):
    torch.spyre.manual_seed(7)
    z = torch.randn(N, device=DEV).cpu()
    assert abs(z.mean().item()) < 0.02 and abs(z.var().item() - 1) < 0.03
    assert ks_statistic(z, lambda x: 0.5 * (1 + torch.erf(x / math.sqrt(2)))) < KS_CRIT
    w = torch.empty(N, device=DEV).normal_(3.0, 2.0).cpu()
    assert abs(w.mean().item() - 3) < 0.04 and abs(w.std().item() - 2) < 0.04
    # two samples from independent streams (the second launch's offset) look alike
    z2 = torch.randn(N, device=DEV).cpu()
    assert not torch.equal(z, z2)
    assert ks_statistic(z2, lambda x: 0.5 * (1 + torch.erf(x / math.sqrt(2)))) < KS_CRIT


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_types(strict, dtype):
    torch.spyre.manual_seed(1)
    u = torch.rand(N, device=DEV, dtype=dtype)
    assert u.dtype == dtype
    u = u.cpu().float()
    assert 0 <= u.min() and u.max() < 1  # never rounds up to 1
    assert abs(u.mean().item() - 0.5) < 0.01
    z = torch.randn(N, device=DEV, dtype=dtype).cpu().float()
    assert abs(z.mean().item()) < 0.02 and abs(z.var().item() - 1) < 0.04
    x = torch.rand_like(torch.empty(10, 3, dtype=dtype, device=DEV))
    y = torch.randn_like(x)
    assert x.dtype == y.dtype == dtype and x.shape == y.shape == (10, 3)


def test_strided_and_empty_outputs(strict):
    torch.spyre.manual_seed(9)
    dense = torch.rand(16, 8, device=DEV).cpu()
    torch.spyre.manual_seed(9)
    base = torch.zeros(8, 16, device=DEV)
    base.t().uniform_()  # a transposed view: element k in its own row-major order
    assert torch.equal(base.t().cpu(), dense)
    big = torch.zeros(6, 10, device=DEV)
    big[1:5, 2:9].normal_()
    b = big.cpu()
    assert (b[1:5, 2:9] != 0).all() and b[:1].eq(0).all() and b[5:].eq(0).all()
    assert b[:, :2].eq(0).all() and b[:, 9:].eq(0).all()
    e = torch.empty(0, 5, device=DEV)
    e.uniform_()
    e.normal_()
    e.bernoulli_(0.5)
    assert torch.rand(0, device=DEV).shape == (0,)


def test_bernoulli(strict):
    torch.spyre.manual_seed(3)
    m = torch.empty(N, device=DEV).bernoulli_(0.3).cpu()
    assert set(m.unique().tolist()) <= {0.0, 1.0}
    sd = math.sqrt(N * 0.3 * 0.7)
    assert abs(m.sum().item() - 0.3 * N) < 5 * sd
    b = torch.empty(N, dtype=torch.bool, device=DEV).bernoulli_(0.8).cpu()
    assert b.dtype == torch.bool and abs(b.sum().item() - 0.8 * N) < 5 * math.sqrt(N * 0.16)
    # tensor p: 0 and 1 are exact, 0.5 is a fair coin; broadcast of a row of probabilities
    p = torch.tensor([0.0, 1.0, 0.5]).repeat(N // 3).to(DEV)
    r = torch.bernoulli(p).cpu()
    assert r[0::3].eq(0).all() and r[1::3].eq(1).all()
    assert abs(r[2::3].sum().item() - N // 6) < 5 * math.sqrt(N / 12)
    rows = torch.empty(1000, 3, device=DEV).bernoulli_(torch.tensor([0.0, 1.0, 0.25]).to(DEV))
    rows = rows.cpu()
    assert rows[:, 0].eq(0).all() and rows[:, 1].eq(1).all()
    assert 150 < rows[:, 2].sum().item() < 350
    with pytest.raises(RuntimeError, match="p to be in"):
        torch.empty(4, device=DEV).bernoulli_(1.5)


def test_exponential(strict):
    torch.spyre.manual_seed(4)
    e = torch.empty(N, device=DEV).exponential_(2.0).cpu()
    assert e.min() >= 0 and torch.isfinite(e).all()
    assert abs(e.mean().item() - 0.5) < 0.01
    assert ks_statistic(e, lambda x: 1 - torch.exp(-2 * x)) < KS_CRIT


@pytest.mark.parametrize("p", [0.1, 0.4, 0.9])
def test_dropout_mask_and_scale(strict, p):
    torch.spyre.manual_seed(8)
    x = torch.randn(200, 500) + 3  # no zeros
    out, mask = torch.native_dropout(x.to(DEV), p, True)
    out, mask = out.cpu(), mask.cpu()
    assert mask.dtype == torch.bool
    n = x.numel()
    assert abs((~mask).sum().item() - p * n) < 5 * math.sqrt(n * p * (1 - p))
    assert torch.equal(out != 0, mask)  # the two masks agree
    torch.testing.assert_close(out, x * mask * (1 / (1 - p)), rtol=1e-6, atol=0)
    y = F.dropout(x.to(DEV), p=p, training=True).cpu()
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - p), rtol=1e-6, atol=0)
    assert torch.equal(F.dropout(x.to(DEV), p=p, training=False).cpu(), x)


def test_dropout_in_a_module(strict):
    torch.spyre.manual_seed(12)
    layer = torch.nn.Dropout(0.25).to(DEV)
    x = torch.ones(64, 64, device=DEV, dtype=torch.float16)
    y = layer(x).cpu()
    vals = y.unique().tolist()
    assert len(vals) == 2 and vals[0] == 0 and abs(vals[1] - 1 / 0.75) < 1e-3
    layer.eval()
    assert torch.equal(layer(x).cpu(), x.cpu())


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32])
def test_randint_range_uniformity_and_seeds(strict, dtype):
    """random_(from, to) / randint on the card: every value in [low, high), each as likely
    (chi-square over the buckets), one seed one answer, a larger draw starts with the smaller."""
    low, high = (0, 256) if dtype == torch.uint8 else (-7, 13)
    torch.spyre.manual_seed(31)
    x = torch.randint(low, high, (N,), device=DEV, dtype=dtype).cpu()
    assert x.dtype == dtype and int(x.min()) == low and int(x.max()) == high - 1
    counts = torch.bincount((x.long() - low), minlength=high - low).double()
    expected = N / (high - low)
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    dof = high - low - 1
    assert chi2 < dof + 5 * math.sqrt(2 * dof), chi2
    g = torch.Generator(DEV)
    g.manual_seed(5)
    a = torch.randint(low, high, (1000,), device=DEV, dtype=dtype, generator=g).cpu()
    g.manual_seed(5)
    b = torch.randint(low, high, (3000,), device=DEV, dtype=dtype, generator=g).cpu()
    assert torch.equal(a, b[:1000])
    g.manual_seed(6)
    assert not torch.equal(a, torch.randint(low, high, (1000,), device=DEV, dtype=dtype,
                                            generator=g).cpu())
    y = torch.empty(5, 9, device=DEV, dtype=dtype).t()  # a strided output
    y.random_(3)
    assert y.cpu().min() >= 0 and y.cpu().max() < 3
    big = torch.randint(0, 2**24, (N,), device=DEV).cpu()  # the widest one-draw range
    assert big.min() >= 0 and big.max() < 2**24 and abs(big.double().mean() / 2**23 - 1) < 0.01


@pytest.mark.parametrize("low,high", [(0, 2**24 + 1), (-(2**31), 2**31), (5, 2**48 + 5)])
def test_randint_of_ranges_past_2_to_24(strict, low, high):
    """Ranges past 2^24 (up to 2^48) take two 24-bit draws and an exact 48-bit multiply-shift:
    every value in [low, high), the 16 top buckets and the low bits as likely as each other."""
    torch.spyre.manual_seed(32)
    x = torch.randint(low, high, (N,), device=DEV).cpu() - low
    span = high - low
    assert int(x.min()) >= 0 and int(x.max()) < span
    for bucket in (x * 16 // span, x % 16):  # the high and the low end of the value
        counts = torch.bincount(bucket, minlength=16).double()
        chi2 = ((counts - N / 16) ** 2 / (N / 16)).sum().item()
        assert chi2 < 15 + 5 * math.sqrt(30), (low, high, chi2)
    g = torch.Generator(DEV)
    g.manual_seed(7)
    a = torch.randint(low, high, (500,), device=DEV, generator=g).cpu()
    g.manual_seed(7)
    assert torch.equal(a, torch.randint(low, high, (500,), device=DEV, generator=g).cpu())


def test_randperm(fallback_reset):
    """randperm on the card: a permutation, one seed one answer, every position as likely to
    come first; beyond one sort program's rows (about 32768) the keys sort in blocks, still on
    the card."""
    g = torch.Generator(DEV)
    for n in (1, 10, 1000, 20000):
        g.manual_seed(n)
        p = torch.randperm(n, device=DEV, generator=g).cpu()
        assert p.dtype == torch.int64 and torch.equal(torch.sort(p).values, torch.arange(n))
        g.manual_seed(n)
        assert torch.equal(p, torch.randperm(n, device=DEV, generator=g).cpu())
    assert torch_spyre.fallback_counts() == {}
    firsts = torch.stack([torch.randperm(8, device=DEV).cpu()[0] for _ in range(800)])
    counts = torch.bincount(firsts, minlength=8).double()
    assert ((counts - 100) ** 2 / 100).sum().item() < 7 + 5 * math.sqrt(14)
    p = torch.randperm(40000, device=DEV, dtype=torch.int32).cpu()
    assert p.dtype == torch.int32 and torch.equal(torch.sort(p).values, torch.arange(40000,
                                                                                     dtype=torch.int32))
    assert torch_spyre.fallback_counts() == {}


def poisson_chi2(samples, rate, bins=20):
    """Pearson's chi-square of the samples against Poisson(rate), over `bins` bins of about
    equal probability (the counts' CDF cut at its quantiles), and its degrees of freedom."""
    ks = torch.arange(0, int(rate + 10 * math.sqrt(rate) + 20), dtype=torch.float64)
    cdf = torch.distributions.Poisson(torch.tensor(rate, dtype=torch.float64)).log_prob(ks).exp()
    cdf = cdf.cumsum(0)
    cuts = torch.unique(torch.searchsorted(cdf, torch.linspace(0, 1, bins + 1)[1:-1].double()))
    edges = ks[cuts]  # bin i: k <= edges[i]; the last bin the rest
    probs = torch.diff(cdf[cuts], prepend=torch.zeros(1, dtype=torch.float64))
    probs = torch.cat([probs, 1 - cdf[cuts[-1]].reshape(1)])
    observed = torch.bincount(torch.searchsorted(edges, samples.double()), minlength=len(probs))
    expected = probs * samples.numel()
    return (((observed - expected) ** 2) / expected).sum().item(), len(probs) - 1


@pytest.mark.parametrize("rate", [0.0, 0.3, 3.0, 9.9, 10.0, 37.5, 1000.0, 2.5e5])
def test_poisson_distribution(strict, rate):
    """Knuth's product of uniforms below rate 10, Hoermann's PTRS from 10 on (the CPU's two
    samplers): whole counts, the mean and variance, and the distribution by chi-square."""
    torch.spyre.manual_seed(21)
    n = 40000
    s = torch.poisson(torch.full((200, n // 200), rate, device=DEV)).cpu()
    assert s.shape == (200, n // 200) and s.dtype == torch.float32
    assert torch.equal(s, s.floor()) and (s >= 0).all()
    if rate == 0:
        assert (s == 0).all()
        return
    sd = math.sqrt(rate / n)
    assert abs(s.mean().item() - rate) < 5 * sd
    assert abs(s.double().var().item() / rate - 1) < 5 * math.sqrt(2 / n)
    chi2, df = poisson_chi2(s.flatten(), rate)
    assert chi2 < df + 6 * math.sqrt(2 * df), (chi2, df)


def test_poisson_seeds_mixed_rates_and_types(strict):
    g = torch.Generator().manual_seed(3)
    rates = torch.cat([torch.rand(3000, generator=g) * 20, torch.tensor([0.0, 10.0, 9.99])])
    rates = rates.view(3003 // 3, 3).t()  # strided
    torch.spyre.manual_seed(5)
    a = torch.poisson(rates.to(DEV)).cpu()
    torch.spyre.manual_seed(5)
    b = torch.poisson(rates.to(DEV)).cpu()
    assert torch.equal(a, b)  # the same seed draws the same counts
    c = torch.poisson(rates.to(DEV)).cpu()
    assert not torch.equal(a, c)
    gen = torch.Generator(DEV).manual_seed(9)
    d = torch.poisson(rates.to(DEV), generator=gen).cpu()
    gen.manual_seed(9)
    assert torch.equal(torch.poisson(rates.to(DEV), generator=gen).cpu(), d)
    # each element's count follows its own rate: the sum of the counts against the sum of the
    # rates (variance: the sum of the rates)
    total = rates.sum().item()
    assert abs(a.sum().item() - total) < 5 * math.sqrt(total)
    assert a[rates == 0].eq(0).all()
    for dtype in (torch.float16, torch.bfloat16):
        h = torch.poisson(torch.full((20000,), 4.0, dtype=dtype, device=DEV)).cpu()
        assert h.dtype == dtype and torch.equal(h, h.floor())
        assert abs(h.float().mean().item() - 4.0) < 5 * math.sqrt(4.0 / 20000)
    assert torch.poisson(torch.empty(0, 3, device=DEV)).shape == (0, 3)
