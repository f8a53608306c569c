"""One rank of test_tensor_parallel.py: ``tp_worker.py INIT_FILE`` with RANK and WORLD_SIZE in
the environment. Rank 0 decodes greedily with the whole TinyGranite on its card (the one-card
reference, shared with the others over gloo); then every rank decodes with the model sharded
over the ranks (models.tensor_parallel), LM head replicated and vocab-parallel: the tokens must
be the reference's, the logits close (and the tokens of generate_static, whose decode steps take
the position as a device tensor over a bucket of the cache). A two-layer Granite's prefill
logits likewise, and a KV head count the ranks do not divide is refused. The decode step under
torch.compile: the same tokens, no graph break at the collectives. And one training step
of a column- then row-parallel MLP: its gradients are the blocks of the one-card gradients;
a vocab-parallel embedding's rows and gradients likewise; an expert-parallel all_to_all
dispatch and combine.
Prints "CASE ok SECONDS" per case and the CPU fallbacks seen; exits non-zero on a mismatch."""

import copy
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

import torch_spyre
from dist_checks import finish
from models import DecodeStep, Granite, TinyGranite, generate_static, tensor_parallel
from torch_spyre.tensor_parallel import VocabParallelEmbedding, parallelize, shard

init_file = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("spyre", init_method=f"file://{init_file}", rank=rank, world_size=world,
                        timeout=timedelta(seconds=120))
gloo = dist.new_group(backend="gloo")
# the tests give each process its own simulated card (SPYRE_SIM_DEVICES=1); under the launcher on
# the kernel backend rank r uses card LOCAL_RANK
dev = torch.device("spyre", int(os.environ.get("LOCAL_RANK", "0")))
torch.spyre.set_device(dev.index)
CONFIG = dict(vocab=256, hidden=256, heads=8, kv_heads=4, intermediate=512, max_len=32)
PROMPT = torch.tensor([[3, 141, 59, 26, 5, 35]])
STEPS = 6

torch_spyre.reset_fallback_counts()
t0 = time.monotonic()
ref_tokens = torch.zeros(1, STEPS, dtype=torch.int64)
ref_logits = torch.zeros(STEPS + 1, CONFIG["vocab"])
if rank == 0:
    tokens, logits = TinyGranite(**CONFIG).to(dev).generate(PROMPT.to(dev), STEPS)
    ref_tokens, ref_logits = tokens.cpu(), torch.cat([lg.cpu() for lg in logits])
dist.broadcast(ref_tokens, 0, group=gloo)
dist.broadcast(ref_logits, 0, group=gloo)
print(f"reference ok {time.monotonic() - t0:.1f}", flush=True)

for vocab_parallel in (False, True):
    t0 = time.monotonic()
    model = tensor_parallel(TinyGranite(**CONFIG), vocab_parallel=vocab_parallel).to(dev)
    layer = model.layer
    assert layer.k_cache.shape[1] == CONFIG["kv_heads"] // world, layer.k_cache.shape
    assert layer.q_proj.weight.shape[0] == CONFIG["hidden"] // world, layer.q_proj.weight.shape
    assert model.embed.weight.shape[0] == (CONFIG["vocab"] // world if vocab_parallel
                                           else CONFIG["vocab"]), model.embed.weight.shape
    tokens, logits = model.generate(PROMPT.to(dev), STEPS)
    name = "vocab_parallel" if vocab_parallel else "replicated_head"
    assert torch.equal(tokens.cpu(), ref_tokens), f"{name}: {tokens.cpu()} != {ref_tokens}"
    torch.testing.assert_close(torch.cat([lg.cpu() for lg in logits]), ref_logits, rtol=1e-3,
                               atol=1e-3, msg=lambda m: f"{name} logits: {m}")
    if not vocab_parallel:  # the decode steps with the position on the card, bucketed cache
        layer.k_cache.zero_()
        layer.v_cache.zero_()
        tokens, _ = generate_static(model, DecodeStep(model), PROMPT.to(dev), STEPS)
        assert torch.equal(tokens.cpu(), ref_tokens), f"{name} static: {tokens.cpu()}"
    print(f"{name} ok {time.monotonic() - t0:.1f}", flush=True)

# torch.compile of the sharded decode step: Dynamo traces the all_reduces as functional
# collectives, one graph per bucket with no break, the tokens still the reference's
t0 = time.monotonic()
model = tensor_parallel(TinyGranite(**CONFIG)).to(dev)
torch._dynamo.reset()
step = torch.compile(DecodeStep(model), dynamic=False)
tokens, _ = generate_static(model, step, PROMPT.to(dev), STEPS)
assert torch.equal(tokens.cpu(), ref_tokens), f"compiled: {tokens.cpu()} != {ref_tokens}"
breaks = dict(torch._dynamo.utils.counters["graph_break"])
assert not breaks, f"compiled: graph breaks {breaks}"
print(f"compiled ok {time.monotonic() - t0:.1f}", flush=True)

# a two-layer Granite (the "layers.i" plan): the prefill logits of the sharded model are the
# one-card logits; and a head count the ranks do not divide is refused
t0 = time.monotonic()
GRANITE = dict(vocab=128, hidden=128, heads=4, kv_heads=world, intermediate=256, layers=2,
               max_len=16)
torch.manual_seed(2)
granite = Granite(**GRANITE)
want = copy.deepcopy(granite).to(dev)(PROMPT.to(dev) % 128, 0).cpu()
got = tensor_parallel(granite).to(dev)(PROMPT.to(dev) % 128, 0).cpu()
torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3, msg=lambda m: f"granite: {m}")
try:
    tensor_parallel(TinyGranite(**dict(CONFIG, kv_heads=1)))
    raise SystemExit("1 KV head was split over the ranks")
except ValueError as e:
    assert "do not split" in str(e), e
print(f"granite ok {time.monotonic() - t0:.1f}", flush=True)

# training: x -> up (column) -> gelu -> down (row) -> loss; gradients of the weights and input
t0 = time.monotonic()
torch.manual_seed(1)
mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
x = torch.randn(4, 16)
whole = copy.deepcopy(mlp).to(dev)
xw = x.to(dev).requires_grad_()
whole(xw).square().mean().backward()
tp = parallelize(copy.deepcopy(mlp), {"0": "colwise", "2": "rowwise"}).to(dev)
xt = x.to(dev).requires_grad_()
tp(xt).square().mean().backward()
for got, want, what in ((tp[0].weight.grad, shard(whole[0].weight.grad, 0), "up weight"),
                        (tp[0].bias.grad, shard(whole[0].bias.grad, 0), "up bias"),
                        (tp[2].weight.grad, shard(whole[2].weight.grad, 1), "down weight"),
                        (tp[2].bias.grad, whole[2].bias.grad, "down bias"),
                        (xt.grad, xw.grad, "input")):
    torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-4, atol=1e-5,
                               msg=lambda m: f"training: {what} gradient: {m}")
# a vocab-parallel embedding (its padding row on one rank): the rows are one card's bit for
# bit, and each rank's weight gradient is its block of one card's
torch.manual_seed(3)
emb = nn.Embedding(8 * world, 16, padding_idx=3)
ids = torch.tensor([[0, 3, 8 * world - 1, 5], [3, 3, 1, 8 * world - 2]])
whole = copy.deepcopy(emb).to(dev)
whole(ids.to(dev)).square().sum().backward()
tp = VocabParallelEmbedding(copy.deepcopy(emb)).to(dev)
rows = tp(ids.to(dev))
assert torch.equal(rows.detach().cpu(), emb(ids).detach()), "vocab-parallel embedding rows"
rows.square().sum().backward()
torch.testing.assert_close(tp.weight.grad.cpu(), shard(whole.weight.grad, 0).cpu(), rtol=1e-6,
                           atol=0, msg=lambda m: f"vocab-parallel embedding gradient: {m}")
with torch.no_grad():
    assert torch.equal(tp(ids.to(dev)).cpu(), emb(ids)), "vocab-parallel embedding, no grad"
print(f"training ok {time.monotonic() - t0:.1f}", flush=True)
# an expert-parallel dispatch: all_to_all_single with split sizes (rank r sends r + k + 1 rows
# of 64 fp16 to rank k, from offsets that are not whole sticks), then the tokens sent back: each
# block arrives bit for bit (on spyre.ko's cards through the p2p transport)
t0 = time.monotonic()
ins = [rank + k + 1 for k in range(world)]
outs = [k + rank + 1 for k in range(world)]


def tokens_of(r):
    n = sum(r + k + 1 for k in range(world))
    return (torch.arange(n * 64, dtype=torch.float32).view(n, 64) / 8 + 1000 * r).half()


got = torch.empty(sum(outs), 64, dtype=torch.float16, device=dev)
dist.all_to_all_single(got, tokens_of(rank).to(dev), outs, ins)
want = torch.cat([tokens_of(r)[sum(r + k + 1 for k in range(rank)):][:r + rank + 1]
                  for r in range(world)])
assert torch.equal(got.cpu(), want), "all_to_all dispatch"
back = torch.empty(sum(ins), 64, dtype=torch.float16, device=dev)
dist.all_to_all_single(back, got, ins, outs)
assert torch.equal(back.cpu(), tokens_of(rank)), "all_to_all combine"
print(f"all_to_all ok {time.monotonic() - t0:.1f}", flush=True)
# the communicator's transport: p2p between spyre.ko's cards (the guest rows ask for it)
transport = dist.distributed_c10d._get_default_group()._get_backend(dev).transport()
print("transport", transport, flush=True)
expected = os.environ.get("SPYRE_COMM_EXPECT_TRANSPORT")
assert not expected or transport == expected, f"transport {transport}, expected {expected}"
print("fallbacks", dict(torch_spyre.fallback_counts()), flush=True)
dist.destroy_process_group()
finish()  # dist_checks.finish: no interpreter finalization
