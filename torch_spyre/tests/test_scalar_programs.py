"""Scalars that change every call are launch arguments of the op library's elementwise programs:
N optimizer steps whose scalars change every step (Adam's bias-corrected step size, AdamW's
decay factor, an LR schedule on SGD) make no new plans and load no new programs on the card once
the first steps have run, however large N, and end with the CPU's parameters; the same for a
loop of ops with a new number each call (torch.spyre.runtime_stats). (The foreach optimizers'
`_foreach_*` ops run on the CPU fallback, so they are not here.)"""

import pytest
import torch
import torch.nn.functional as F

import torch_spyre
from conftest import close, make


def programs():
    """(plans made in this process, programs loaded on the card)."""
    s = torch.spyre.runtime_stats()
    return s["op_plan_cache_misses"], s["program_cache_misses"]


def train(opt_cls, sched, device, steps, kw, after=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.ReLU(), torch.nn.Linear(40, 8))
    model = model.to(device)
    opt = opt_cls(model.parameters(), **kw)
    lr = sched(opt) if sched else None
    x = make((16, 24), torch.float32).to(device)
    y = make((16, 8), torch.float32, seed=9).to(device)
    for i in range(steps):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        if lr:
            lr.step()
        if after:
            after(i)
    return [p.detach().cpu() for p in model.parameters()]


CASES = [
    (torch.optim.Adam, None, dict(lr=1e-2, foreach=False)),
    (torch.optim.AdamW, None, dict(lr=1e-2, weight_decay=0.1, foreach=False)),
    (torch.optim.SGD, lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0 / (1 + e)),
     dict(lr=0.1, momentum=0.9)),
    (torch.optim.SGD, lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9),
     dict(lr=0.1)),
]


@pytest.mark.parametrize("opt_cls,sched,kw", CASES)
def test_optimizer_steps_make_no_new_programs(fallback_reset, opt_cls, sched, kw):
    steps, warm = 40, 3  # the first steps differ (Adam's state, SGD's momentum buffer)
    seen = {}

    def after(i):
        if i + 1 == warm:
            torch.spyre.synchronize()
            seen["warm"] = programs()

    got = train(opt_cls, sched, "spyre", steps, kw, after)
    torch.spyre.synchronize()
    plans, loads = programs()
    assert (plans, loads) == seen["warm"], (
        f"steps {warm + 1}..{steps} made {plans - seen['warm'][0]} plans and loaded "
        f"{loads - seen['warm'][1]} programs")
    assert torch_spyre.fallback_counts() == {}  # every step ran on the card
    want = train(opt_cls, sched, "cpu", steps, kw)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_new_number_every_call_reuses_one_program(fallback_reset, dtype):
    x = make((7, 65), dtype).to("spyre")
    m = (make((7, 65), torch.float32, seed=1) > 0).to("spyre")
    ops = [
        lambda k: x * k,
        lambda k: x / k,
        lambda k: x - k,
        lambda k: x.add(x, alpha=k),
        lambda k: x.masked_fill(m, k),
        lambda k: x.clamp(-k, k),
        lambda k: x > k,
    ]
    for op in ops:
        op(0.25)  # planned and loaded once
    torch.spyre.synchronize()
    before = programs()
    cpu = x.cpu().float()
    for i in range(200):
        k = 0.5 + i / 137.0
        for j, op in enumerate(ops):
            got = op(k)
            if i % 50 == 0:
                # the op in fp32 on the number rounded to fp32, rounded once to the type; x + k x
                # is one fused multiply-add on the card (two roundings here: 1 ulp apart at most)
                want = [cpu * k, cpu / k, cpu - k, cpu + k * cpu,
                        cpu.masked_fill(m.cpu(), k), cpu.clamp(-k, k), cpu > k][j]
                want = want.to(got.dtype)
                if j == 3:
                    close(got.cpu(), want, dtype)
                else:
                    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    torch.spyre.synchronize()
    assert programs() == before
    assert torch_spyre.fallback_counts() == {}
