"""The ``spyre`` backend across machines: on-card collectives inside a node, gloo between nodes.

``init_process_group("spyre")`` groups the ranks by node (a node is one OS instance: its host
name and boot id, or ``TORCH_SPYRE_NODE_ID`` when set). When all ranks share one node the backend
is the C++ ``ProcessGroupSpyre`` alone; otherwise it is ``HierarchicalProcessGroup``:

- the ranks of a node form a ``ProcessGroupSpyre`` of their own (libspyre's collectives, card to
  card where the cards reach each other);
- the first rank of each node (its leader) is in a gloo group of the leaders, over the network
  (``GLOO_SOCKET_IFNAME`` picks the interface);
- every rank is also in a gloo group of all ranks, for the collectives that are not worth a
  hierarchy (all_gather, gather, scatter, send/recv, barrier), through host copies.

all_reduce: reduce inside the node on the cards, the leaders all-reduce the node results on the
host (fp32 for 16-bit tensors, so one rounding at the end), then the leader broadcasts inside the
node. broadcast: inside the root's node to its leader, between the leaders, inside the other
nodes. Every call finishes before it returns (the work is complete). Documentation/torch_spyre.md
"Across machines".

A collective that fails on a rank (its node's part raised, a gloo error, its own wait timed out)
fails the group there, and the failure spreads to every rank within milliseconds instead of
leaving ranks of other nodes waiting on a rank that caught the error: the rank records "rank R
failed: REASON" in the group's store (the first record wins), aborts its node's
ProcessGroupSpyre (its node's ranks blocked there get an error) and drops its gloo groups (their
sockets close, so every rank blocked in gloo on it gets an error). A rank whose collective fails
that way does the same, and raises the recorded message; every later call raises it at once.
"""

import datetime
import functools
import os
import socket

import torch
import torch.distributed as dist

from torch._C._distributed_c10d import _create_work_from_future

from . import _C

_ReduceOp = dist.ReduceOp


def node_identity():
    """What tells one node from another: TORCH_SPYRE_NODE_ID, else host name and boot id (VMs
    cloned from one image share a host name, never a boot id)."""
    forced = os.environ.get("TORCH_SPYRE_NODE_ID")
    if forced:
        return forced
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def nodes_of_ranks(store, rank, size):
    """Every rank's node identity, through the process group's store (one key per rank)."""
    store.set(f"spyre_node/{rank}", node_identity())
    return [store.get(f"spyre_node/{r}").decode() for r in range(size)]


def _done(result):
    """A finished collective's Work. A C++ Work over a completed future, not a Python Work
    subclass: C++ callers (DDP) keep the Work after Python dropped it, and a Python subclass's
    overrides die with its Python object (a plain Work would then wait forever)."""
    fut = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


class _ArgumentError(RuntimeError):
    """A call's own argument error, raised before it communicates: the group stays usable."""


_ABORT_KEY = "spyre_abort"  # in the group's store: "rank R failed: REASON", the first failure


def _fails_the_group(method):
    """Runs a collective; an error while it communicates fails the group (see the module's
    docstring). The teardown runs after the except block: the error's traceback holds frames
    whose gloo Work keeps a gloo context (and its sockets) alive."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        if self._failed is not None:
            raise dist.DistBackendError(self._failed)
        try:
            return method(self, *args, **kwargs)
        except _ArgumentError:
            raise
        except Exception as e:  # noqa: BLE001  (any error mid-collective leaves peers waiting)
            if self._failed is not None:  # a nested collective failed the group already
                raise
            here = _first_line(e)
        err = dist.DistBackendError(self._fail(here))
        if here not in str(err):
            err.__cause__ = RuntimeError(f"here: {here}")
        raise err
    return guarded


def _first_line(e):
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


class HierarchicalProcessGroup(dist.ProcessGroup):
    def __init__(self, store, rank, size, timeout, nodes):
        super().__init__(rank, size)
        order = list(dict.fromkeys(nodes))  # nodes by their first rank
        node_of = [order.index(n) for n in nodes]
        me = node_of[rank]
        self._local = [r for r in range(size) if node_of[r] == me]
        self._leaders = [node_of.index(k) for k in range(len(order))]
        self._node_of = node_of
        self._local_rank = self._local.index(rank)
        self._timeout = timeout
        self._store = store
        self._failed = None  # the recorded failure once the group failed
        self._intra = (_C.ProcessGroupSpyre(dist.PrefixStore(f"spyre_intra/{me}/", store),
                                            self._local_rank, len(self._local), timeout)
                       if len(self._local) > 1 else None)
        self._inter = (dist.ProcessGroupGloo(dist.PrefixStore("spyre_inter/", store), me,
                                             len(order), timeout)
                       if rank in self._leaders and len(order) > 1 else None)
        self._flat = dist.ProcessGroupGloo(dist.PrefixStore("spyre_flat/", store), rank, size,
                                           timeout)

    def getBackendName(self):
        return "spyre"

    def name(self):
        return "spyre"

    # ---- failure ----
    def _fail(self, reason):
        """Records this rank's failure unless one is recorded, then lets go of every peer:
        aborts the node's ProcessGroupSpyre, drops the gloo groups (closing their sockets).
        Returns the recorded failure."""
        mine = f"rank {self.rank()} failed: {reason}"
        try:
            self._failed = self._store.compare_set(_ABORT_KEY, "", mine).decode()
        except Exception:  # noqa: BLE001  (the store's host is gone: this rank's own reason)
            self._failed = mine
        if self._intra is not None:
            self._intra.abort()
        self._inter = self._flat = None  # the last references: gloo closes the connections
        return self._failed

    # ---- helpers ----
    def _intra_call(self, method, *args):
        if self._intra is not None:
            self._intra_wait(lambda: getattr(self._intra, method)(*args).wait())

    def _intra_broadcast(self, tensors, local_root):
        if self._intra is not None:
            opts = dist.BroadcastOptions()
            opts.rootRank = local_root
            self._intra_wait(lambda: self._intra.broadcast(tensors, opts).wait())

    def _intra_wait(self, run):
        """Runs a collective of the node's ProcessGroupSpyre. Its errors number the ranks
        within the node ("rank 1 (pid ...) died"): the message says which global ranks
        those are."""
        try:
            run()
        except _ArgumentError:
            raise
        except Exception as e:  # noqa: BLE001  (re-raised with the ranks named)
            legend = ", ".join(f"{i} = rank {r}" for i, r in enumerate(self._local))
            raise RuntimeError(f"node group (its ranks: {legend}): {_first_line(e)}") from e

    def _inter_on_host(self, tensor, fn):
        """Runs fn(host copy) among the leaders and copies the result back (leaders only)."""
        host = tensor.to("cpu", torch.float32 if tensor.dtype in (torch.float16, torch.bfloat16)
                         else tensor.dtype)
        fn(host)
        tensor.copy_(host)

    # ---- collectives ----
    @_fails_the_group
    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else _ReduceOp.SUM
        avg = op == _ReduceOp.AVG
        inner = _ReduceOp.SUM if avg else op
        for t in tensors:
            self._check(t)
            o = dist.AllreduceOptions()
            o.reduceOp = inner
            self._intra_call("allreduce", [t], o)
            if self._inter is not None:
                def across(host, inner=inner):
                    io = dist.AllreduceOptions()
                    io.reduceOp = inner
                    self._inter.allreduce([host], io).wait()
                    if avg:
                        host.div_(self.size())
                self._inter_on_host(t, across)
            self._intra_broadcast([t], 0)
        return _done(tensors)

    @_fails_the_group
    def allreduce_coalesced(self, tensors, opts=None):
        o = dist.AllreduceOptions()
        o.reduceOp = opts.reduceOp if opts is not None else _ReduceOp.SUM
        return self.allreduce(tensors, o)

    @_fails_the_group
    def broadcast(self, tensors, opts):
        root = opts.rootRank
        root_node = self._node_of[root]
        for t in tensors:
            self._check(t)
            # 1. inside the root's node: root -> every rank there (its leader among them)
            if self._node_of[self.rank()] == root_node:
                self._intra_broadcast([t], self._local.index(root))
            # 2. between the leaders
            if self._inter is not None:
                def across(host):
                    bo = dist.BroadcastOptions()
                    bo.rootRank = root_node
                    self._inter.broadcast([host], bo).wait()
                self._inter_on_host(t, across)
            # 3. inside the other nodes: leader -> the rest
            if self._node_of[self.rank()] != root_node:
                self._intra_broadcast([t], 0)
        return _done(tensors)

    @_fails_the_group
    def allgather(self, output_lists, inputs, opts=None):
        for outs, t in zip(output_lists, inputs):
            self._check(t)
            host_outs = [torch.empty_like(o, device="cpu") for o in outs]
            self._flat.allgather([host_outs], [t.cpu()]).wait()
            for o, h in zip(outs, host_outs):
                o.copy_(h)
        return _done(output_lists)

    @_fails_the_group
    def _allgather_base(self, output, input, opts=None):
        # all_gather_into_tensor: torch calls it from Python, so this method is found first
        return self.allgather([list(output.view(-1).chunk(self.size()))], [input.view(-1)])

    @_fails_the_group
    def _reduce_scatter_base(self, output, input, opts=None):
        return self.reduce_scatter([output], [list(input.view(-1).chunk(self.size()))], opts)

    @_fails_the_group
    def reduce_scatter(self, outputs, input_lists, opts=None):
        for out, ins in zip(outputs, input_lists):
            full = torch.cat([i.reshape(-1) for i in ins])
            o = dist.AllreduceOptions()
            o.reduceOp = opts.reduceOp if opts is not None else _ReduceOp.SUM
            self.allreduce([full], o)
            out.copy_(full.chunk(self.size())[self.rank()].view_as(out))
        return _done(outputs)

    @_fails_the_group
    def reduce(self, tensors, opts):
        # An all_reduce: the root's tensor holds the result (the others' too, which reduce
        # leaves unspecified).
        o = dist.AllreduceOptions()
        o.reduceOp = opts.reduceOp
        return self.allreduce(tensors, o)

    @_fails_the_group
    def send(self, tensors, dst, tag):
        for t in tensors:
            self._check(t)
        # gloo's Work keeps the host copies until they are sent: isend stays asynchronous
        return self._flat.send([t.cpu() for t in tensors], dst, tag)

    @_fails_the_group
    def recv(self, tensors, src, tag):
        host = [torch.empty_like(t, device="cpu") for t in tensors]
        self._flat.recv(host, src, tag).wait()
        for t, h in zip(tensors, host):
            t.copy_(h)
        return _done(tensors)

    @_fails_the_group
    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        """all_to_all_single through the host: gloo's alltoall over all ranks (the blocks are
        per pair, so a node's cards have no shared work to do first)."""
        self._check(input)
        self._check(output)
        host = torch.empty_like(output, device="cpu")
        self._flat.alltoall_base(host, input.cpu(), output_split_sizes, input_split_sizes,
                                 dist.AllToAllOptions()).wait()
        output.copy_(host)
        return _done([output])

    @_fails_the_group
    def alltoall(self, outputs, inputs, opts=None):
        """all_to_all (a tensor per rank) as one all_to_all_single of their bytes."""
        for t in list(outputs) + list(inputs):
            self._check(t)

        def as_bytes(t):
            return t.detach().cpu().contiguous().view(-1).view(torch.uint8)

        send = torch.cat([as_bytes(t) for t in inputs])
        recv = torch.empty(sum(o.numel() * o.element_size() for o in outputs), dtype=torch.uint8)
        self._flat.alltoall_base(recv, send, [o.numel() * o.element_size() for o in outputs],
                                 [t.numel() * t.element_size() for t in inputs],
                                 dist.AllToAllOptions()).wait()
        at = 0
        for o in outputs:
            n = o.numel() * o.element_size()
            o.copy_(recv[at:at + n].view(o.dtype).view(o.shape))
            at += n
        return _done(outputs)

    @_fails_the_group
    def gather(self, output_lists, inputs, opts):
        root = opts.rootRank
        host = [[torch.empty_like(o, device="cpu") for o in outs] for outs in output_lists]
        go = dist.GatherOptions()
        go.rootRank = root
        self._flat.gather(host if self.rank() == root else [], [t.cpu() for t in inputs],
                          go).wait()
        if self.rank() == root:
            for outs, hs in zip(output_lists, host):
                for o, h in zip(outs, hs):
                    o.copy_(h)
        return _done(output_lists)

    @_fails_the_group
    def scatter(self, outputs, input_lists, opts):
        root = opts.rootRank
        host = [torch.empty_like(o, device="cpu") for o in outputs]
        so = dist.ScatterOptions()
        so.rootRank = root
        ins = [[t.cpu() for t in ts] for ts in input_lists] if self.rank() == root else []
        self._flat.scatter(host, ins, so).wait()
        for o, h in zip(outputs, host):
            o.copy_(h)
        return _done(outputs)

    @_fails_the_group
    def barrier(self, opts=None):
        if self._intra is not None:
            torch.spyre.synchronize()
        self._flat.barrier().wait()
        return _done([])

    def _check(self, t):
        if t.device.type != "spyre":
            raise _ArgumentError(
                f"spyre backend: expected a spyre tensor, got one on {t.device}")


def create(store, rank, size, timeout):
    """The backend for one process group: ProcessGroupSpyre on one node, else hierarchical."""
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(milliseconds=timeout)
    nodes = nodes_of_ranks(store, rank, size)
    if len(set(nodes)) == 1:
        return _C.ProcessGroupSpyre(store, rank, size, timeout)
    return HierarchicalProcessGroup(store, rank, size, timeout, nodes)
