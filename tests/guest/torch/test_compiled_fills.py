"""A compiled call whose fused kernels read CPU scalar tensors (as an optimizer's step counts)
is one SUBMIT through spyre.ko (issue 22): each scalar reaches the card as a fill of its value,
which the call's submission batch holds (libspyre.md "Submission batching"; before, each fill
ended the batch). New values at every call, so a fill that kept an old value shows. Small, so
that run-all.sh's torch row stays short (torch.compile's time is Dynamo and Inductor)."""

import torch

import torch_spyre  # noqa: F401


def f(x, w, s, t):
    return torch.softmax(((x * s + 1.0) @ w) * t, dim=-1)


def test_a_compiled_call_reading_cpu_scalars_is_one_submission(monkeypatch):
    # imported here, not at collection: the debug kernel's run collects this file and deselects
    # the compiled tests, and importing Inductor there costs minutes under TCG
    from torch_spyre._inductor import runtime

    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")  # a fallback is an error
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(32, 64, generator=g), torch.randn(64, 64, generator=g) / 8
    dx, dw = x.to("spyre"), w.to("spyre")
    compiled = torch.compile(f)
    per_call = []
    for i in range(4):
        s, t = torch.tensor(float(i + 2)), torch.tensor(0.5 * (i + 1))
        torch.spyre.synchronize()
        before, fused = torch.spyre.submissions(0), runtime.STATS["fused"]
        out = compiled(dx, dw, s, t)
        per_call.append(torch.spyre.submissions(0) - before)
        assert runtime.STATS["fused"] - fused == 2, "both pointwise kernels fused (fills)"
        torch.testing.assert_close(out.cpu(), f(x, w, s, t), rtol=1e-3, atol=1e-4,
                                   msg=f"call {i}")
    print("submissions per compiled call:", per_call)
    # the first call compiles; later ones are one submission: the matmul and both kernels
    # with the fills of their scalars
    assert per_call[1:] == [1, 1, 1], per_call
