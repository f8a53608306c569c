"""One rank of test_distributed.py: ``dist_worker.py INIT_FILE MODE`` with RANK and WORLD_SIZE in
the environment. Every collective on spyre tensors is compared with the same collective on the
CPU over gloo; exits non-zero on a mismatch."""

import functools
import os
import sys
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_spyre  # noqa: F401  (registers the "spyre" backend)
from dist_checks import close, rank_data

init_file, mode = sys.argv[1], sys.argv[2]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("spyre", init_method=f"file://{init_file}", rank=rank, world_size=world,
                        timeout=timedelta(seconds=60))
assert dist.get_backend() == "spyre"
gloo = dist.new_group(backend="gloo")
dev = torch.device("spyre", 0)  # each process has its own card (SPYRE_SIM_DEVICES=1)


data = functools.partial(rank_data, rank)


if mode == "collectives":
    # processes on simulated cards cannot share card memory: host staging (spyre.ko's cards
    # push card to card, the guest rows check that)
    spyre_pg = dist.distributed_c10d._get_default_group()._get_backend(dev)
    assert spyre_pg.transport() == "", "no communicator before the first collective"
    dist.all_reduce(torch.ones(1, device=dev))
    assert spyre_pg.transport() == "host-staged", spyre_pg.transport()
    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX,
           "min": dist.ReduceOp.MIN}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n in (1, 7, 1001):
            x = data(n, dtype)
            for name, op in ops.items():
                y = x.to(dev)
                work = dist.all_reduce(y, op=op, async_op=True)
                assert work.wait() and work.is_completed()
                ref = x.float().clone()
                dist.all_reduce(ref, op=dist.ReduceOp.SUM if name == "avg" else op, group=gloo)
                if name == "avg":
                    ref /= world
                close(y, ref.to(dtype), f"all_reduce {name} {dtype} n={n}")
            for root in range(world):
                y = data(n, dtype, 7).to(dev)
                dist.broadcast(y, src=root)
                ref = data(n, dtype, 7).float()
                dist.broadcast(ref, src=root, group=gloo)
                close(y, ref.to(dtype), f"broadcast root {root} {dtype}")
            out = torch.empty(world * n, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, x.to(dev))
            refs = [torch.empty(n) for _ in range(world)]
            dist.all_gather(refs, x.float(), group=gloo)
            close(out, torch.cat(refs).to(dtype), f"all_gather_into_tensor {dtype}")
            outs = [torch.empty(n, dtype=dtype, device=dev) for _ in range(world)]
            dist.all_gather(outs, x.to(dev))
            close(torch.cat([o.cpu() for o in outs]), torch.cat(refs).to(dtype), "all_gather")
            full = data(world * n, dtype, 3)
            out = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(out, full.to(dev), op=dist.ReduceOp.SUM)
            ref = full.float().clone()
            dist.all_reduce(ref, group=gloo)
            close(out, ref[rank * n:(rank + 1) * n].to(dtype), f"reduce_scatter_tensor {dtype}")
            # reduce to every root (the root's tensor only is defined afterwards)
            for root in range(world):
                for name in ("sum", "max"):
                    y = x.to(dev)
                    dist.reduce(y, dst=root, op=ops[name])
                    ref = x.float().clone()
                    dist.reduce(ref, dst=root, op=ops[name], group=gloo)
                    if rank == root:
                        close(y, ref.to(dtype), f"reduce {name} root {root} {dtype} n={n}")
            # gather and scatter through send/recv
            root = world - 1
            gathered = [torch.empty(n, dtype=dtype, device=dev) for _ in range(world)]
            dist.gather(x.to(dev), gathered if rank == root else None, dst=root)
            refs = [torch.empty(n) for _ in range(world)] if rank == root else None
            dist.gather(x.float(), refs, dst=root, group=gloo)
            if rank == root:
                close(torch.cat([g.cpu() for g in gathered]), torch.cat(refs).to(dtype), "gather")
            parts = [data(n, dtype, 20 + r) for r in range(world)]
            got = torch.empty(n, dtype=dtype, device=dev)
            dist.scatter(got, [p.to(dev) for p in parts] if rank == 0 else None, src=0)
            want = torch.empty(n)
            dist.scatter(want, [p.float() for p in parts] if rank == 0 else None, src=0,
                         group=gloo)
            close(got, want.to(dtype), f"scatter {dtype} n={n}")
    # send/recv (and isend/irecv: complete when they return) of any dtype: a relay from rank 0
    # around the ring; in call order per pair
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool):
        for n in (1, 1001, 600001):  # 600001 int64s: one message in two 4 MiB chunks
            msg = torch.arange(n, dtype=torch.int64).remainder(2 if dtype == torch.bool else 97)
            msg = msg.to(dtype)
            nxt, prv = (rank + 1) % world, (rank - 1) % world
            buf = torch.empty(n, dtype=dtype, device=dev)
            if rank == 0:
                dist.send(msg.to(dev), dst=nxt)
                dist.irecv(buf, src=prv).wait()
            else:
                dist.recv(buf, src=prv)
                dist.isend(buf, dst=nxt).wait()
            assert torch.equal(buf.cpu(), msg), f"send/recv relay {dtype} n={n} rank {rank}"
    # both ranks of a pair isend 16 MiB (four 4 MiB chunks) to each other, then irecv, then
    # wait: the sends go into free outbox slots instead of waiting for the receiver (with one
    # message in flight per rank this deadlocked until the timeout)
    peer = rank ^ 1
    if peer < world:
        def pattern(r):
            return torch.arange(4 << 20, dtype=torch.float32).remainder(1000) + 1000 * r
        got = torch.empty(4 << 20, device=dev)
        works = [dist.isend(pattern(rank).to(dev), dst=peer), dist.irecv(got, src=peer)]
        for w in works:
            w.wait()
        assert torch.equal(got.cpu(), pattern(peer)), f"mutual isend rank {rank}"
    if world >= 2:  # two messages from one rank to another arrive in order
        if rank == 0:
            dist.send(torch.full((5,), 1.0, device=dev), dst=1)
            dist.send(torch.full((5,), 2.0, device=dev), dst=1)
        elif rank == 1:
            a, b = torch.empty(5, device=dev), torch.empty(5, device=dev)
            dist.recv(a, src=0)
            dist.recv(b, src=0)
            assert a.cpu().tolist() == [1.0] * 5 and b.cpu().tolist() == [2.0] * 5, (a, b)
    try:
        dist.recv(torch.empty(1, device=dev))  # no src: any source
        raise SystemExit("recv from any source was not refused")
    except RuntimeError as e:
        assert "any source" in str(e), str(e)
    # all_to_all_single (equal blocks, and split sizes: rank r sends r + k + 1 rows to rank k)
    # and all_to_all (rank r sends r + k + 2 elements to rank k): every block bit for bit the
    # sender's; the sender's data is rank_data(sender, ...), so the expected blocks are local
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        def rows_of(r, n):
            return rank_data(r, n * 3, dtype, 40).view(n, 3)
        got = torch.empty(world * 2, 3, dtype=dtype, device=dev)
        dist.all_to_all_single(got, rows_of(rank, world * 2).to(dev))
        want = torch.cat([rows_of(r, world * 2)[2 * rank:2 * rank + 2] for r in range(world)])
        assert torch.equal(got.cpu(), want), f"all_to_all_single {dtype}"
        ins = [rank + k + 1 for k in range(world)]
        outs = [k + rank + 1 for k in range(world)]
        got = torch.empty(sum(outs), 3, dtype=dtype, device=dev)
        dist.all_to_all_single(got, rows_of(rank, sum(ins)).to(dev), outs, ins)
        want = torch.cat([rows_of(r, sum(r + k + 1 for k in range(world)))[
            sum(r + k + 1 for k in range(rank)):][:r + rank + 1] for r in range(world)])
        assert torch.equal(got.cpu(), want), f"all_to_all_single with splits {dtype}"
        outs = [torch.empty(r + rank + 2, dtype=dtype, device=dev) for r in range(world)]
        dist.all_to_all(outs, [rank_data(rank, rank + k + 2, dtype, 50 + k).to(dev)
                               for k in range(world)])
        for r in range(world):
            assert torch.equal(outs[r].cpu(), rank_data(r, r + rank + 2, dtype, 50 + rank)), (
                f"all_to_all {dtype} from rank {r}")
    # blocks of several transfer chunks (3 x 4 MiB each way), a send and a receive alternating
    big = [torch.full((3 << 20,), float(100 * rank + k), device=dev) for k in range(world)]
    outs = [torch.empty(3 << 20, device=dev) for _ in range(world)]
    dist.all_to_all(outs, big)
    for r in range(world):
        assert torch.equal(outs[r].cpu(), torch.full((3 << 20,), float(100 * r + rank))), r
    try:
        dist.all_to_all_single(torch.empty(world + 1, device=dev),
                               torch.empty(world + 1, device=dev))
        raise SystemExit("an all_to_all_single of unequal blocks was not refused")
    except (RuntimeError, ValueError) as e:
        assert "split" in str(e), str(e)
    # other dtypes: broadcast and all_gather move their bytes (odd byte counts too), all_reduce
    # reduces integers exactly through float32 and refuses values past 2^24
    for dtype in (torch.int64, torch.int32, torch.uint8, torch.bool):
        for n in (1, 6, 1001):
            x = torch.randint(0, 2 if dtype == torch.bool else 100, (n,),
                              generator=torch.Generator().manual_seed(rank)).to(dtype)
            big = x.to(torch.int64) * 1000003 if dtype == torch.int64 else x
            y = big.to(dev)
            dist.broadcast(y, src=world - 1)
            ref = big.clone()
            dist.broadcast(ref, src=world - 1, group=gloo)
            assert torch.equal(y.cpu(), ref), f"broadcast {dtype} n={n}"
            out = torch.empty(world * n, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, big.to(dev))
            refs = [torch.empty_like(big) for _ in range(world)]
            dist.all_gather(refs, big, group=gloo)
            assert torch.equal(out.cpu(), torch.cat(refs)), f"all_gather {dtype} n={n}"
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN):
                y = x.to(dev)
                dist.all_reduce(y, op=op)
                ref = x.to(torch.int64) if dtype == torch.bool else x.clone()
                dist.all_reduce(ref, op=op, group=gloo)
                assert torch.equal(y.cpu(), ref.to(dtype)), f"all_reduce {op} {dtype} n={n}"
    # allreduce_coalesced: several tensors of one dtype in one all_reduce
    xs = [data(n, torch.float32, 11 + n).view(-1, 1) for n in (3, 130, 1)]
    ys = [x.to(dev) for x in xs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch deprecates the Python wrapper
        dist.all_reduce_coalesced(ys)
    for x, y in zip(xs, ys):
        ref = x.clone()
        dist.all_reduce(ref, group=gloo)
        close(y, ref, "all_reduce_coalesced")
    try:
        dist.all_reduce(torch.full((3,), 2**24, dtype=torch.int32, device=dev))
        raise SystemExit("an int32 all_reduce past 2^24 was not refused")
    except RuntimeError as e:
        assert "2^24" in str(e) or "exact" in str(e), str(e)
    dist.barrier()
    # a 2-D tensor and a later op on the same stream see the result
    m = torch.full((3, 5), float(rank + 1), device=dev)
    dist.all_reduce(m)
    assert torch.equal((m * 2).cpu(), torch.full((3, 5), float(world * (world + 1)))), m.cpu()
    dist.destroy_process_group()
elif mode == "peer_dies":
    y = torch.ones(1000, device=dev)
    dist.all_reduce(y)  # everybody is in
    dist.barrier(group=gloo)
    if rank == world - 1:
        os._exit(17)  # dies without a word
    time.sleep(0.3)
    t0 = time.monotonic()
    try:
        dist.all_reduce(y)
    except RuntimeError as e:
        assert "died" in str(e), str(e)
        assert time.monotonic() - t0 < 10, "noticed too late"
        print(f"rank {rank}: {e}".splitlines()[0], file=sys.stderr)
        os._exit(0)  # the gloo group's teardown would wait for the dead rank
    raise SystemExit("all_reduce succeeded with a dead peer")
