"""torch.spyre.SpyreGraph: the work of a block captured on a side stream and replayed as one
submission (Documentation/torch_spyre.md "Graphs"). Replays equal eager for a pointwise chain
and an MLP with inputs changing in place; a replay is one submission; memory freed during the
capture is not handed to other tensors while the graph lives; an op that falls back to the CPU
fails the capture with an error that says so. Compiled calls (backend="spyre_graphs",
mode="reduce-overhead") replay without writing a caller's tensor; a training step replays its
forward and backward apart and trains as the CPU, never overwriting outputs still held (a kept
loss, gradients before zero_grad); a decode whose KV cache grows by one each step replays one
captured graph per bucket of the cache length.
"""

import os
import warnings

import pytest
import torch
import torch.nn as nn

import torch_spyre  # noqa: F401
from conftest import make


def chain(x, y):
    return ((x * 2.0 + y).relu() - y * 0.5).sigmoid() * x


def replays_chain_in_one_submission(x, y, run, seed):
    """Three times: new values into the static inputs x and y, then run() (a replay returning
    the output) must take exactly one submission and equal chain() run eagerly."""
    for step in range(3):
        nx = make((33, 70), torch.float32, seed=seed + step)
        ny = make((33, 70), torch.float32, seed=seed + 10 + step)
        x.copy_(nx)
        y.copy_(ny)
        torch.spyre.synchronize()
        before = torch.spyre.submissions()
        r = run()
        torch.spyre.synchronize()
        assert torch.spyre.submissions() - before == 1, step
        assert torch.equal(r.cpu(), chain(nx.to("spyre"), ny.to("spyre")).cpu()), step


def test_pointwise_chain_replays_equal_eager_in_one_submission():
    x = make((33, 70), torch.float32).to("spyre")
    y = make((33, 70), torch.float32, seed=1).to("spyre")
    chain(x, y)  # warm-up: plans and programs outside the capture
    torch.spyre.synchronize()
    g = torch.spyre.SpyreGraph()
    with torch.spyre.graph(g):
        out = chain(x, y)
    torch.spyre.synchronize()
    replays_chain_in_one_submission(x, y, lambda: (g.replay(), out)[1], seed=10)
    # Eager takes one submission per op on the simulator (the kernel backend batches launches
    # queued while a job is in flight, so there it depends on timing).
    if os.environ.get("SPYRE_BACKEND") == "sim":
        before = torch.spyre.submissions()
        chain(x, y)
        torch.spyre.synchronize()
        assert torch.spyre.submissions() - before > 3
    g.reset()


def test_mlp_replays_equal_eager():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.Linear(128, 64)).to("spyre")
    x = make((8, 64), torch.float32).to("spyre")
    with torch.no_grad():
        mlp(x)
        g = torch.spyre.SpyreGraph()
        with torch.spyre.graph(g):
            out = mlp(x)
        for step in range(3):
            nx = make((8, 64), torch.float32, seed=30 + step)
            x.copy_(nx)
            g.replay()
            want = mlp(nx.to("spyre")).cpu()
            assert torch.equal(out.cpu(), want), step


def test_memory_freed_during_capture_stays_with_the_graph():
    x = make((256,), torch.float32).to("spyre")
    (x * 3.0 + 1.0).sum()
    torch.spyre.synchronize()
    g = torch.spyre.SpyreGraph()
    s = torch.spyre.Stream()
    with torch.spyre.graph(g, stream=s):
        tmp = x * 3.0
        tmp_ptr = tmp.data_ptr()
        out = tmp + 1.0
        out_ptr = out.data_ptr()
        del tmp  # back to the graph's pool: the replay writes it
    with torch.spyre.stream(s):  # same stream and size: the ordinary cache would reuse it
        other = torch.full((256,), 7.0, device="spyre")
    assert other.data_ptr() != tmp_ptr
    nx = make((256,), torch.float32, seed=5)
    x.copy_(nx)
    g.replay()
    torch.spyre.synchronize()
    assert torch.equal(other.cpu(), torch.full((256,), 7.0))
    assert torch.equal(out.cpu(), (nx.to("spyre") * 3.0 + 1.0).cpu())
    g.reset()
    # The graph is gone: its memory is ordinary cache again.
    del out
    with torch.spyre.stream(s):
        again = torch.empty((256,), device="spyre")
    assert again.data_ptr() in (tmp_ptr, out_ptr)


def test_a_cpu_fallback_op_fails_the_capture_clearly(fallback_reset):
    x = make((7, 9), torch.float32).to("spyre")
    g = torch.spyre.SpyreGraph()
    with pytest.raises(RuntimeError, match="cannot be captured"):
        with torch.spyre.graph(g):
            torch.nextafter(x, x)
    # The side stream and the card work normally afterwards.
    assert torch.equal((x + 1).cpu(), x.cpu() + 1)


def test_default_stream_cannot_be_captured():
    g = torch.spyre.SpyreGraph()
    with pytest.raises(RuntimeError, match="default stream cannot be captured"):
        g.capture_begin()


# ---- compiled calls (backend="spyre_graphs": Inductor, then capture and replay) ----

@pytest.fixture
def fresh_dynamo():
    from torch_spyre._inductor import replay

    torch.compiler.reset()
    for k in replay.STATS:
        replay.STATS[k] = 0
    yield replay.STATS
    torch.compiler.reset()


def test_compiled_chain_replays_in_one_submission(fresh_dynamo):
    f = torch.compile(chain, backend="spyre_graphs")
    x = make((33, 70), torch.float32).to("spyre")
    y = make((33, 70), torch.float32, seed=1).to("spyre")
    f(x, y)  # warm-up
    f(x, y)  # captured, replayed
    assert fresh_dynamo["captures"] == 1
    replays_chain_in_one_submission(x, y, lambda: pytree_leaves(f(x, y))[0], seed=40)
    # x and y are read in place (the capture call passed them as the warm-up did): other
    # tensors of the same signature get a second graph, which reads its arguments through
    # private copies; x and y are never written
    want_x, want_y = x.cpu(), y.cpu()
    for seed in (60, 62, 64):
        nx, ny = make((33, 70), torch.float32, seed=seed), make((33, 70), torch.float32, seed + 1)
        (r,) = pytree_leaves(f(nx.to("spyre"), ny.to("spyre")))
        assert torch.equal(r.cpu(), chain(nx.to("spyre"), ny.to("spyre")).cpu()), seed
    assert torch.equal(x.cpu(), want_x) and torch.equal(y.cpu(), want_y)
    assert fresh_dynamo["captures"] == 2 and fresh_dynamo["replays"] == 7, fresh_dynamo
    (r,) = pytree_leaves(f(x, y))  # the first graph again
    assert torch.equal(r.cpu(), chain(x, y).cpu())
    assert fresh_dynamo["captures"] == 2 and fresh_dynamo["replays"] == 8, fresh_dynamo


def test_a_replayed_call_updates_the_tensors_it_is_given(fresh_dynamo):
    # a call that updates an argument in place (a KV cache) must update the caller's tensor:
    # two caches used in turn are each read and written in place by a graph of their own
    def step(cache, x):
        cache.mul_(0.5).add_(x)
        return cache.sum(-1)

    f = torch.compile(step, backend="spyre_graphs")
    caches = [make((16, 64), torch.float32, seed=s).to("spyre") for s in (1, 2)]
    want = [c.cpu() for c in caches]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every call replays once captured
        for i in range(6):
            x = make((16, 64), torch.float32, seed=10 + i)
            k = i % 2
            want[k] = want[k] * 0.5 + x
            r = f(caches[k], x.to("spyre"))
            assert torch.allclose(r.cpu(), want[k].sum(-1), atol=1e-4), i
            for c, w in zip(caches, want):
                assert torch.allclose(c.cpu(), w, atol=1e-5), i
    assert fresh_dynamo["captures"] == 2 and fresh_dynamo["replays"] == 5, fresh_dynamo


def test_compiled_call_on_another_card_replays_on_that_card(fresh_dynamo):
    # the capture runs on the inputs' card, whichever card is current
    if torch.spyre.device_count() < 2:
        pytest.skip("needs two cards")
    f = torch.compile(chain, backend="spyre_graphs")
    x = make((33, 70), torch.float32).to("spyre:1")
    y = make((33, 70), torch.float32, seed=1).to("spyre:1")
    assert torch.spyre.current_device() == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failed capture warns
        for _ in range(3):
            (r,) = pytree_leaves(f(x, y))
    assert fresh_dynamo["captures"] == 1 and fresh_dynamo["replays"] == 2, fresh_dynamo
    before = torch_spyre._C._submissions(1)
    (r,) = pytree_leaves(f(x, y))
    assert torch_spyre._C._submissions(1) == before + 1
    assert torch.equal(r.cpu(), chain(x, y).cpu())


def test_compiled_mlp_replays_equal_eager(fresh_dynamo):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.Linear(128, 64)).to("spyre")
    f = torch.compile(mlp, backend="spyre_graphs")
    x = make((8, 64), torch.float32).to("spyre")
    with torch.no_grad():
        for step in range(4):
            nx = make((8, 64), torch.float32, seed=70 + step)
            x.copy_(nx)
            r = f(x)
            assert torch.allclose(r.cpu(), mlp(nx.to("spyre")).cpu(), atol=1e-5, rtol=1e-5), step
    assert fresh_dynamo["captures"] == 1 and fresh_dynamo["replays"] == 3


def test_a_compiled_call_that_cannot_be_captured_warns_once_and_runs(fresh_dynamo,
                                                                      fallback_reset):
    def g(x):
        return torch.nextafter(x, x + 1.0) * 2.0

    f = torch.compile(g, backend="spyre_graphs")
    x = make((7, 9), torch.float32).to("spyre")
    want = g(x).cpu()
    f(x)
    with pytest.warns(UserWarning, match="cannot be replayed as a graph.*cannot be captured"):
        r = f(x)
    assert torch.equal(r.cpu(), want)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = f(x)
    assert torch.equal(r.cpu(), want)
    assert fresh_dynamo["capture_failures"] == 1 and fresh_dynamo["replays"] == 0


def test_reduce_overhead_mode_replays_in_one_submission(fresh_dynamo):
    # mode="reduce-overhead" (Inductor's cudagraphs, CUDA only) replays spyre graphs instead
    f = torch.compile(chain, mode="reduce-overhead")
    x = make((33, 70), torch.float32).to("spyre")
    y = make((33, 70), torch.float32, seed=1).to("spyre")
    f(x, y)
    f(x, y)
    for step in range(2):
        x.copy_(make((33, 70), torch.float32, seed=80 + step))
        torch.spyre.synchronize()
        before = torch.spyre.submissions()
        (r,) = pytree_leaves(f(x, y))
        torch.spyre.synchronize()
        assert torch.spyre.submissions() - before == 1, step
        assert torch.equal(r.cpu(), chain(x, y).cpu()), step
    assert fresh_dynamo["captures"] == 1 and fresh_dynamo["replays"] == 3


def _models(seed=0):
    torch.manual_seed(seed)
    cpu = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    dev = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to("spyre")


def _same_parameters(dev, cpu, what):
    for a, b in zip(dev.parameters(), cpu.parameters()):
        assert torch.allclose(a.detach().cpu(), b.detach(), atol=1e-5), (what, a, b)


def _compile(model, how):
    kw = {"backend": "spyre_graphs"} if how == "spyre_graphs" else {"mode": "reduce-overhead"}
    return torch.compile(model, **kw)


@pytest.mark.parametrize("how", ["spyre_graphs", "reduce-overhead"])
def test_a_compiled_training_step_replays_forward_and_backward(fresh_dynamo, how):
    # the forward and the backward replay apart (inside AOTAutograd), each call's outputs new
    # tensors: the parameters follow the CPU's step by step, and the graphs are reused
    cpu, dev = _models()

    def loss_of(model, x):
        return model(x).square().mean()

    f = _compile(lambda x: loss_of(dev, x), how)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (cpu, dev)]
    subs, jobs = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing runs op by op
        for step in range(6):
            x = make((8, 16), torch.float32, seed=90 + step)
            opts[0].zero_grad()
            loss_of(cpu, x).backward()
            opts[1].zero_grad()
            torch.spyre.synchronize()
            before, jobs0 = torch.spyre.submissions(), torch.spyre.card_jobs()
            f(x.to("spyre")).backward()
            torch.spyre.synchronize()
            subs.append(torch.spyre.submissions() - before)
            jobs.append(torch.spyre.card_jobs() - jobs0)
            for opt in opts:
                opt.step()
            _same_parameters(dev, cpu, step)
    # one graph for the forward and one for the backward: calls 1 warm up, 2 capture, then
    # replay; the fresh input x is copied into the forward's private copy of it in the
    # forward's submission (the graph joins the copy's batch)
    assert fresh_dynamo["captures"] == 2 and fresh_dynamo["replays"] == 10, fresh_dynamo
    assert fresh_dynamo["busy_calls"] == 0 and fresh_dynamo["capture_failures"] == 0
    # the upload of x, the forward, the loss gradient's ones_like (a fill), the backward
    assert subs[2:] == [4] * 4, subs
    if os.environ.get("SPYRE_BACKEND") == "sim":  # replayed launches are linked card jobs
        assert max(jobs[2:]) < jobs[0], jobs


def test_training_replay_never_overwrites_outputs_still_held(fresh_dynamo):
    # losses kept across steps: the forward's outputs of the last replay are still held when
    # the next step starts, so the second graph serves it (the two alternate while only the
    # last loss is kept); when both graphs' outputs are held the call runs op by op. Every
    # kept loss keeps its value.
    cpu, dev = _models(1)

    def step(model, x):
        return model(x).square().mean()

    f = torch.compile(lambda x: step(dev, x), backend="spyre_graphs")
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (cpu, dev)]
    kept, want, last = [], [], None
    with pytest.warns(UserWarning, match="still held"):
        for i in range(7):
            x = make((8, 16), torch.float32, seed=120 + i)
            for opt in opts:
                opt.zero_grad()
            loss = f(x.to("spyre"))
            ref = step(cpu, x)
            loss.backward()
            ref.backward()
            for opt in opts:
                opt.step()
            want.append(ref.item())
            if i < 4:
                last = loss  # only the last loss held: the two forward graphs alternate
            else:
                if i == 4:
                    kept.append(last)
                kept.append(loss)  # every loss held from now on
            _same_parameters(dev, cpu, i)
            if i == 3:  # two forward graphs, and a backward graph for the saved tensors of each
                assert fresh_dynamo["busy_calls"] == 0, fresh_dynamo
                assert fresh_dynamo["captures"] == 4, fresh_dynamo
    for got, w in zip(kept, want[3:]):
        assert abs(got.item() - w) <= 1e-5 * max(1.0, abs(w)), (got, w)
    assert fresh_dynamo["busy_calls"] >= 2, fresh_dynamo


def test_training_replay_of_gradient_accumulation_trains_as_the_cpu(fresh_dynamo):
    # two backwards per optimizer step: the first's gradients become .grad (held until
    # zero_grad), so the second backward of a step is the second graph; both replay
    cpu, dev = _models(2)
    f = torch.compile(dev, mode="reduce-overhead")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (cpu, dev)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(4):
            for model, opt, dev_in in ((cpu, opts[0], False), (f, opts[1], True)):
                opt.zero_grad()
                for micro in range(2):
                    x = make((8, 16), torch.float32, seed=150 + 2 * step + micro)
                    model(x.to("spyre") if dev_in else x).square().mean().backward()
                opt.step()
            _same_parameters(dev, cpu, step)
    assert fresh_dynamo["busy_calls"] == 0 and fresh_dynamo["replays"] >= 8, fresh_dynamo
    assert fresh_dynamo["captures"] <= 4, fresh_dynamo


# ---- a decode whose KV cache grows (models.py: DecodeStep, the position on the card, the
# attention over a bucket of the cache with a mask) ----

PROMPT, STEPS = 12, 22  # positions 12 .. 33: the buckets of 16, 32 and 48 cache entries


@pytest.mark.parametrize("how", ["spyre_graphs", "reduce-overhead"])
def test_growing_kv_decode_replays_one_graph_per_bucket(fresh_dynamo, how):
    from torch._dynamo.utils import counters

    from models import DecodeStep, TinyGranite, generate_static

    cpu = TinyGranite().eval()
    prompt = torch.randint(0, 512, (1, PROMPT), generator=torch.Generator().manual_seed(3))
    want_tokens, want_logits = cpu.generate(prompt, STEPS)  # the CPU, positions as ints
    eager = TinyGranite().to("spyre").eval()
    eager_tokens, eager_logits = generate_static(eager, DecodeStep(eager), prompt.to("spyre"),
                                                 STEPS)
    model = TinyGranite().to("spyre").eval()
    kw = {"backend": "spyre_graphs"} if how == "spyre_graphs" else {"mode": "reduce-overhead"}
    compiled = torch.compile(DecodeStep(model), **kw)
    counters.clear()
    subs = []

    jobs = []

    def step(tok, pos, kv_len):
        torch.spyre.synchronize()
        before, replays = torch.spyre.submissions(), fresh_dynamo["replays"]
        jobs0 = torch.spyre.card_jobs()
        logits = compiled(tok, pos, kv_len)
        torch.spyre.synchronize()
        subs.append((torch.spyre.submissions() - before, fresh_dynamo["replays"] - replays))
        jobs.append(torch.spyre.card_jobs() - jobs0)
        return logits

    tokens, logits = generate_static(model, step, prompt.to("spyre"), STEPS)
    assert torch.equal(tokens.cpu(), want_tokens) and torch.equal(eager_tokens.cpu(), want_tokens)
    for i, (g, e, w) in enumerate(zip(logits, eager_logits, want_logits)):
        assert torch.allclose(g.cpu(), e.cpu(), atol=1e-5, rtol=1e-5), i
        assert torch.allclose(g.cpu(), w, atol=1e-3, rtol=1e-3), i
    # one capture per bucket, the first call of each bucket its warm-up, every other step a
    # replay of one submission; Dynamo compiles the first bucket and once more with the length
    # dynamic (no graph per step, none for the third bucket)
    assert fresh_dynamo["captures"] == 3, fresh_dynamo
    assert fresh_dynamo["replays"] == STEPS - 3 and fresh_dynamo["eager_calls"] == 3, fresh_dynamo
    assert counters["stats"]["unique_graphs"] == 2, counters["stats"]
    warmups = [0, 16 - PROMPT, 32 - PROMPT]  # then the capture (its replay included)
    for i, (n, replayed) in enumerate(subs):
        assert replayed == (0 if i in warmups else 1), (i, subs)
        if i not in warmups and i - 1 not in warmups:
            assert n == 1, (i, subs)
    # On the simulator a replay's consecutive launches run as linked jobs (libspyre.md "Linked
    # launches"): a replayed step is at most a third of the jobs of an eager step (its launches
    # and copies), the target; unlinked (SPYRE_GRAPH_LINK=0) it is about as many.
    with torch_spyre.profiler.profile() as prof:
        DecodeStep(eager)(torch.full((1, 1), 7, device="spyre"),
                          torch.full((1,), 20, dtype=torch.int64, device="spyre"), 32)
    eager_launches = sum(e.launches for e in prof.events)
    replayed = [jobs[i] for i in range(len(jobs)) if i not in warmups and i - 1 not in warmups]
    assert replayed and max(replayed) * 3 <= eager_launches, (replayed, eager_launches)


def test_static_kv_decode_plans_once_per_bucket():
    # eager, the library side: a step at a new position of a bucket finds every plan cached
    # (the attention's plan is keyed by the bucket of key lengths, not the position)
    from models import DecodeStep, TinyGranite

    model = TinyGranite().to("spyre").eval()
    step = DecodeStep(model)
    tok = torch.full((1, 1), 7, device="spyre")
    with torch.no_grad():
        model(torch.arange(12).view(1, 12).to("spyre"), 0)
        pos = torch.full((1,), 12, dtype=torch.int64, device="spyre")
        step(tok, pos, 16)
        for _ in range(3):  # positions 13, 14, 15
            with torch_spyre.profiler.profile() as p:
                step(tok, pos, 16)
            attn = [e for e in p.events if e.op == "attention"]
            assert attn and all(e.plan_cached for e in p.events if e.launches), p.events
        # the position-as-int step: decode attention takes the key length as an argument, so
        # a new length inside a planned bucket of lengths finds its plan cached (ops.md
        # "Attention plans across key lengths"; it built one per new length before)
        model(tok, 40)
        with torch_spyre.profiler.profile() as p:
            model(tok, 41)
        attn = [e for e in p.events if e.op == "attention"]
        assert attn and all(e.plan_cached for e in attn), attn


def pytree_leaves(out):
    import torch.utils._pytree as pytree

    return pytree.tree_leaves(out)


# ---- random numbers in graphs ----

def _draws(x):
    out, mask = torch.native_dropout(x, 0.5, True)  # two launches of one random stream
    return out, mask, torch.rand_like(x)


def test_a_graph_replays_random_ops_with_new_draws():
    # each replay draws what the captured ops would draw queued one by one from the card's
    # generator at that point (the same values as eager from the same seed), and moves the
    # generator on as they would; native_dropout's mask still agrees with the values it kept
    x = make((40, 64), torch.float32).to("spyre") + 3.0
    _draws(x)  # warm-up: plans and programs outside the capture
    torch.manual_seed(5)
    want = [[t.cpu() for t in _draws(x)] for _ in range(4)]
    after = torch.rand_like(x).cpu()
    torch.manual_seed(5)
    g = torch.spyre.SpyreGraph()
    with torch.spyre.graph(g):
        outs = _draws(x)
    got = []
    for _ in range(4):
        g.replay()
        got.append([t.cpu() for t in outs])
    for i, (w, r) in enumerate(zip(want, got)):
        for a, b in zip(w, r):
            assert torch.equal(a, b), i
        assert torch.equal(r[0], x.cpu() * r[1] * 2.0), i
    assert not torch.equal(got[0][2], got[1][2]) and not torch.equal(got[0][1], got[1][1])
    assert torch.equal(torch.rand_like(x).cpu(), after)  # the generator moved on as eager's
    g.reset()


def test_a_random_op_with_its_own_generator_is_not_captured():
    gen = torch.Generator(device="spyre").manual_seed(1)
    x = torch.rand(64, device="spyre", generator=gen)
    g = torch.spyre.SpyreGraph()
    with pytest.raises(RuntimeError, match="generator of its own cannot be captured"):
        with torch.spyre.graph(g):
            torch.rand(64, device="spyre", generator=gen)
    g.reset()
    assert x.shape == (64,)


def _dropout_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.3), nn.GELU(),
                         nn.Linear(64, 32)).to("spyre")


@pytest.mark.parametrize("grad", [False, True])
def test_compiled_dropout_replays_new_masks(fresh_dynamo, grad):
    # a compiled call with dropout replays (inference under no_grad, and a training step's
    # forward and backward): every call draws new masks, the same ones as the compiled call
    # without replay from the same seed (Inductor's random ops are the card's generator's)
    model = _dropout_mlp()
    x = make((16, 64), torch.float32).to("spyre")

    def step(f):
        if not grad:
            with torch.no_grad():
                return [f(x).cpu()]
        model.zero_grad()
        loss = f(x).square().mean()
        loss.backward()
        return [loss.detach().cpu()] + [p.grad.cpu() for p in model.parameters()]

    results = {}
    for backend in ("inductor", "spyre_graphs"):
        torch.compiler.reset()
        f = torch.compile(model, backend=backend)
        torch.manual_seed(11)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing runs op by op
            results[backend] = [step(f) for _ in range(5)]
    assert fresh_dynamo["replays"] >= 3 * (2 if grad else 1), fresh_dynamo
    for i, (a, b) in enumerate(zip(results["inductor"], results["spyre_graphs"])):
        for u, v in zip(a, b):
            assert torch.equal(u, v), i
    outs = [r[0] for r in results["spyre_graphs"]]
    assert all(not torch.equal(outs[i], outs[i + 1]) for i in range(4))
