"""One rank of a job over several nodes (hierarchical.py): ``multinode_worker.py NODES [INIT_FILE
[peer_dies|peer_fails]]`` with RANK, WORLD_SIZE (and LOCAL_RANK) in the environment; env:// init
(MASTER_ADDR, MASTER_PORT) without INIT_FILE; instead of the cases, peer_dies: the last rank
exits mid-job; peer_fails: the last rank's collective fails, it catches the error and stays
alive. Checks that the backend is the hierarchical one over NODES nodes, compares
every collective on spyre tensors (and reduce, gather, scatter, isend/irecv) with gloo on the CPU, then trains DistributedDataParallel on
spyre for three steps against one process training the whole batch on the CPU. Prints
"CASE ok SECONDS" per case; exits non-zero on a mismatch. Run by test_multinode.py (the host, a
node id per rank) and tests/multinode/run.sh (two VMs joined by an emulated network)."""

import functools
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_spyre  # noqa: F401  (registers the "spyre" backend)
from dist_checks import close, rank_data
from torch_spyre.hierarchical import HierarchicalProcessGroup

nodes = int(sys.argv[1])
init = f"file://{sys.argv[2]}" if len(sys.argv) > 2 else "env://"
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
mode = sys.argv[3] if len(sys.argv) > 3 else None
# peer_fails: 30 s, so that a run where the failure does not reach the others ends (their wait
# times out)
timeout = 30 if mode == "peer_fails" else 300
dist.init_process_group("spyre", init_method=init, rank=rank, world_size=world,
                        timeout=timedelta(seconds=timeout))
pg = dist.distributed_c10d._get_default_group()
dev = torch.device("spyre", int(os.environ.get("LOCAL_RANK", "0")))
if nodes > 1:
    assert isinstance(pg, HierarchicalProcessGroup), type(pg)
    assert len(pg._leaders) == nodes, (pg._leaders, nodes)
else:  # one node: the C++ backend alone
    assert type(pg._get_backend(dev)).__name__ == "ProcessGroupSpyre", pg._get_backend(dev)
gloo = dist.new_group(backend="gloo")
torch.spyre.set_device(dev.index)


def case(name, fn):
    t0 = time.perf_counter()
    fn()
    print(f"{name} ok {time.perf_counter() - t0:.1f}", flush=True)


data = functools.partial(rank_data, rank)


def all_reduce():
    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX,
           "min": dist.ReduceOp.MIN}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n in (1, 1001):
            x = data(n, dtype)
            for name, op in ops.items():
                y = x.to(dev)
                assert dist.all_reduce(y, op=op, async_op=True).wait()
                ref = x.float().clone()
                dist.all_reduce(ref, op=dist.ReduceOp.SUM if name == "avg" else op, group=gloo)
                if name == "avg":
                    ref /= world
                close(y, ref.to(dtype), f"all_reduce {name} {dtype} n={n}")


def broadcast_and_gather():
    for root in range(world):
        y = data(33, torch.float32, 7).to(dev)
        dist.broadcast(y, src=root)
        ref = data(33, torch.float32, 7)
        dist.broadcast(ref, src=root, group=gloo)
        close(y, ref, f"broadcast root {root}")
    x = data(5, torch.bfloat16)
    outs = [torch.empty(5, dtype=torch.bfloat16, device=dev) for _ in range(world)]
    dist.all_gather(outs, x.to(dev))
    refs = [torch.empty(5) for _ in range(world)]
    dist.all_gather(refs, x.float(), group=gloo)
    for r in range(world):
        close(outs[r], refs[r].to(torch.bfloat16), f"all_gather from rank {r}")
    dist.barrier()


def the_rest():
    """all_gather_into_tensor, reduce_scatter_tensor, reduce, gather, scatter, send/recv,
    all_to_all."""
    x = data(6, torch.float32, 3)
    out = torch.empty(6 * world, device=dev)
    dist.all_gather_into_tensor(out, x.to(dev))
    refs = [torch.empty(6) for _ in range(world)]
    dist.all_gather(refs, x, group=gloo)
    close(out, torch.cat(refs), "all_gather_into_tensor")
    full = data(4 * world, torch.float32, 4)
    mine = torch.empty(4, device=dev)
    dist.reduce_scatter_tensor(mine, full.to(dev))
    ref = full.clone()
    dist.all_reduce(ref, group=gloo)
    close(mine, ref[4 * rank:4 * rank + 4], "reduce_scatter_tensor")
    y = x.to(dev)
    dist.reduce(y, dst=world - 1, op=dist.ReduceOp.MAX)
    ref = x.clone()
    dist.all_reduce(ref, op=dist.ReduceOp.MAX, group=gloo)
    if rank == world - 1:
        close(y, ref, "reduce to the last rank")
    got = [torch.empty(6, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(x.to(dev), got, dst=0)
    if rank == 0:
        close(torch.cat(got), torch.cat(refs), "gather")
    part = torch.empty(3, device=dev)
    chunks = [torch.arange(3.0, device=dev) + 10 * r for r in range(world)] if rank == 1 else None
    dist.scatter(part, chunks, src=1)
    close(part, torch.arange(3.0) + 10 * rank, "scatter from rank 1")
    # a ring of isend/irecv: each rank sends its rank to the next
    to, frm = (rank + 1) % world, (rank - 1) % world
    box = torch.empty(2, device=dev)
    reqs = [dist.isend(torch.full((2,), float(rank), device=dev), to),
            dist.irecv(box, frm)]
    for r in reqs:
        r.wait()
    close(box, torch.full((2,), float(frm)), "isend/irecv ring")
    # all_to_all_single with split sizes (rank r sends r + k + 1 rows to rank k) and all_to_all
    # of a tensor per rank: each block bit for bit the sender's
    def rows_of(r):
        n = sum(r + k + 1 for k in range(world))
        return torch.arange(n * 2, dtype=torch.float32).view(n, 2) + 100 * r
    got = torch.empty(sum(k + rank + 1 for k in range(world)), 2, device=dev)
    dist.all_to_all_single(got, rows_of(rank).to(dev), [k + rank + 1 for k in range(world)],
                           [rank + k + 1 for k in range(world)])
    want = torch.cat([rows_of(r)[sum(r + k + 1 for k in range(rank)):][:r + rank + 1]
                      for r in range(world)])
    assert torch.equal(got.cpu(), want), "all_to_all_single"
    outs = [torch.empty(r + rank + 1, dtype=torch.int64, device=dev) for r in range(world)]
    dist.all_to_all(outs, [torch.full((rank + k + 1,), 10 * rank + k, device=dev)
                           for k in range(world)])
    for r in range(world):
        assert torch.equal(outs[r].cpu(), torch.full((r + rank + 1,), 10 * r + rank)), r


def ddp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    reference = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                    torch.nn.Linear(32, 4))
    reference.load_state_dict(model.state_dict())
    if rank != 0:  # DDP must broadcast rank 0's parameters
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    ddp_model = torch.nn.parallel.DistributedDataParallel(model.to(dev))
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(5)
    for step in range(3):
        x, target = torch.randn(4 * world, 16, generator=g), torch.randn(4 * world, 4, generator=g)
        mine = slice(4 * rank, 4 * rank + 4)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp_model(x[mine].to(dev)), target[mine].to(dev)).backward()
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), target).backward()
        ref_opt.step()
        for (name, p), q in zip(ddp_model.module.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=2e-4, atol=2e-5,
                                       msg=f"step {step} {name}")


if mode == "peer_fails":
    # The last rank (on the last node) loses its card (the simulator's fault hook) under the
    # work before an all_reduce: its all_reduce fails, it catches the error and stays alive.
    # "together": every rank is in that all_reduce; "after": the last node's ranks call it
    # first, the other nodes' ranks once those caught their errors (a new group). Either way
    # every rank's all_reduce must raise within seconds naming the last rank, not after the 30 s
    # timeout, and a later call raises at once with the same message. The last rank stays alive
    # (its exit would close its connections) until every rank has measured: the last barrier.
    from torch_spyre.testing import inject_sim_fault

    def attempt(y, group):
        t0 = time.monotonic()
        try:
            dist.all_reduce(y, group=group)
            msg = "(no error)"
        except RuntimeError as e:
            msg = str(e).splitlines()[0]
        return msg, time.monotonic() - t0

    def lose_card(y):
        inject_sim_fault(dev.index, "lost")  # the next launch finds the card removed
        return y * 2

    def card_back():  # for what comes next: the card back, its failed work reported
        inject_sim_fault(dev.index, "none")
        for _ in range(8):
            try:
                torch.spyre.synchronize(dev)
                break
            except RuntimeError:
                pass

    problems = []

    def check(name, msg, took, first=None):
        print(f"rank {rank}: peer_fails {name}: error after {took:.3f} s: {msg[:300]}",
              flush=True)
        if not msg.startswith(f"rank {world - 1} failed: "):
            problems.append(f"{name}: the error does not name rank {world - 1}: {msg}")
        if first is not None and msg != first:
            problems.append(f"{name}: another error than the first call's")
        if took > 10:
            problems.append(f"{name}: took {took:.1f} s")

    def go_on():  # every rank's checks passed so far (over the side gloo group): a group
        # whose failure did not reach every rank is not used again (gloo after a timeout hangs)
        flag = torch.tensor([len(problems)])
        dist.all_reduce(flag, group=gloo)
        return flag.item() == 0

    last = rank == world - 1
    y = torch.ones(8, device=dev)
    dist.all_reduce(y)  # everybody is in (the communicators exist)
    dist.barrier(group=gloo)
    first, took = attempt(lose_card(y) if last else y, None)
    check("together", first, took)
    if go_on():
        check("together again", *attempt(y, None), first)
    if last:
        card_back()
    if go_on():
        after = dist.new_group(backend="spyre")
        y = torch.ones(8, device=dev)
        dist.all_reduce(y, group=after)
        dist.barrier(group=gloo)
        last_node = pg._node_of[rank] == pg._node_of[world - 1]
        if last_node:  # the last node's ranks first
            first, took = attempt(lose_card(y) if last else y, after)
        dist.barrier(group=gloo)  # the last node's ranks caught their errors and are alive
        if not last_node:
            first, took = attempt(y, after)
        check("after", first, took)
        if go_on():
            check("after again", *attempt(y, after), first)
    dist.barrier(group=gloo)  # everybody measured: the last rank may go
    if last:
        card_back()
    dist.destroy_process_group()
    if problems:
        sys.exit(f"rank {rank} peer_fails: " + "; ".join(problems))
elif mode == "peer_dies":
    # the last rank (on the last node) exits mid-job; every other rank's next collective must
    # raise within seconds, not wait for the timeout. A rank that sees the error exits as an
    # uncaught error would
    y = torch.ones(8, device=dev)
    dist.all_reduce(y)  # everybody is in
    dist.barrier(group=gloo)
    if rank == world - 1:
        os._exit(17)
    time.sleep(0.3)
    t0 = time.monotonic()
    try:
        for _ in range(3):
            dist.all_reduce(y)
    except RuntimeError as e:
        took = time.monotonic() - t0
        print(f"rank {rank}: error after {took:.1f} s: {str(e).splitlines()[0][:200]}",
              flush=True)
        sys.stdout.flush()
        os._exit(0 if took < 60 else 3)
    print(f"rank {rank}: all_reduce succeeded with a dead peer", flush=True)
    os._exit(4)
else:
    case("all_reduce", all_reduce)
    # tests/multinode/run.sh: the cards of a VM reach each other, so a node's ranks go card to
    # card
    want = os.environ.get("TORCH_SPYRE_EXPECT_TRANSPORT")
    if want and nodes > 1 and pg._intra is not None:
        assert pg._intra.transport() == want, f"intra-node transport {pg._intra.transport()}"
    case("broadcast_all_gather_barrier", broadcast_and_gather)
    case("the_rest", the_rest)
    case("ddp", ddp)
    dist.destroy_process_group()
