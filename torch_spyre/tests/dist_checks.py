"""Inputs and comparisons the torch.distributed workers share (dist_worker.py,
multinode_worker.py)."""

import torch


def rank_data(rank, n, dtype, salt=0):
    """n values of `dtype` that differ per rank; 16-bit ones small integers, so sums are exact."""
    g = torch.Generator().manual_seed(100 * rank + salt)
    if dtype == torch.float32:
        return torch.rand(n, generator=g) * 8 - 4
    return torch.randint(-8, 9, (n,), generator=g).to(dtype)


def close(got, want, what):
    """got (any device) equals want to the rounding of want's dtype."""
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[want.dtype]
    torch.testing.assert_close(got.cpu().float(), want.float(), rtol=tol, atol=tol, msg=what)
