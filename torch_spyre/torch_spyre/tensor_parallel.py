"""Megatron-style tensor parallelism over a torch.distributed process group (the ``spyre``
backend, one card per rank; any backend whose tensors the module holds works).

A column-parallel linear keeps a block of the output features on each rank (its input is
replicated, its output sharded); a row-parallel linear keeps the matching block of the input
features and all-reduces its partial products, so a column-parallel linear followed by a
row-parallel one (attention q/k/v then o, MLP gate/up then down) needs one all_reduce and
everything between them runs on the local shard. ``parallelize(module, plan)`` swaps
``nn.Linear`` submodules for their sharded forms by name (and an ``nn.Embedding`` for its
vocab-parallel form: each rank holds a block of the rows, looks up the ids in its block, and one
all_reduce sums the ranks' rows); the model itself must then use its local sizes (heads per
rank, for example). Both linears are differentiable: the all_reduce of
the row-parallel forward is the identity backward, and the column-parallel input's gradient is
all-reduced backward (conjugate pairs), so the same modules train.
Documentation/torch_spyre.md "Tensor parallel".
"""

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding", "parallelize",
           "shard"]


def _group_rank_size(group):
    return dist.get_rank(group), dist.get_world_size(group)


def shard(t, dim, group=None):
    """This rank's block of t along dim (world size must divide it), contiguous."""
    rank, size = _group_rank_size(group)
    n = t.shape[dim]
    if n % size:
        raise ValueError(f"tensor_parallel: dimension {dim} of size {n} does not split over "
                         f"{size} ranks")
    return t.narrow(dim, rank * (n // size), n // size).contiguous()


class _AllReduceForward(torch.autograd.Function):
    """Sum over the ranks forward, identity backward (after a row-parallel product)."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous().clone()  # not x itself: autograd may still hold it
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _AllReduceBackward(torch.autograd.Function):
    """Identity forward, sum over the ranks backward (the replicated input of a column-parallel
    product: each rank's gradient covers its output block only)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _GatherLastDim(torch.autograd.Function):
    """The ranks' blocks concatenated along the last dim forward, this rank's block backward."""

    @staticmethod
    def forward(ctx, x, group):
        rank, size = _group_rank_size(group)
        ctx.group = group
        x = x.contiguous()
        out = torch.empty((size,) + tuple(x.shape), dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(out, x, group=group)
        return out.movedim(0, -2).reshape(*x.shape[:-1], size * x.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        return shard(grad, -1, ctx.group), None


class ColumnParallelLinear(nn.Module):
    """This rank's block of a linear's output features. ``gather_output``: all-gather the blocks
    into the full output (a vocab-parallel LM head), else the output stays sharded (the input of
    a RowParallelLinear)."""

    def __init__(self, linear, group=None, gather_output=False):
        super().__init__()
        self.group, self.gather_output = group, gather_output
        self.in_features = linear.in_features
        self.out_features = linear.out_features // dist.get_world_size(group)
        self.weight = nn.Parameter(shard(linear.weight.detach(), 0, group),
                                   requires_grad=linear.weight.requires_grad)
        self.bias = None if linear.bias is None else nn.Parameter(
            shard(linear.bias.detach(), 0, group), requires_grad=linear.bias.requires_grad)

    def forward(self, x):
        if torch.is_grad_enabled() and x.requires_grad:
            x = _AllReduceBackward.apply(x, self.group)
        y = nn.functional.linear(x, self.weight, self.bias)
        return _GatherLastDim.apply(y, self.group) if self.gather_output else y

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features} (per rank), "
                f"bias={self.bias is not None}, gather_output={self.gather_output}")


class RowParallelLinear(nn.Module):
    """This rank's block of a linear's input features; the partial products are all-reduced
    and the (replicated) bias added once after."""

    def __init__(self, linear, group=None):
        super().__init__()
        self.group = group
        self.in_features = linear.in_features // dist.get_world_size(group)
        self.out_features = linear.out_features
        self.weight = nn.Parameter(shard(linear.weight.detach(), 1, group),
                                   requires_grad=linear.weight.requires_grad)
        self.bias = None if linear.bias is None else nn.Parameter(
            linear.bias.detach().clone(), requires_grad=linear.bias.requires_grad)

    def forward(self, x):
        y = nn.functional.linear(x, self.weight)
        if torch.is_grad_enabled() and y.requires_grad:
            y = _AllReduceForward.apply(y, self.group)
        else:  # inference: the product is ours, reduce it in place
            y = y.contiguous()
            dist.all_reduce(y, group=self.group)
        return y if self.bias is None else y + self.bias

    def extra_repr(self):
        return (f"in_features={self.in_features} (per rank), out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class VocabParallelEmbedding(nn.Module):
    """This rank's block of an embedding's rows (the vocabulary split over the ranks): ids in the
    block are looked up, the others give rows of -0.0, and an all_reduce sums the ranks' rows,
    so every rank gets the full embedding bit for bit (x + -0.0 is x, signed zeros included).
    Backward, each rank's weight gradient covers its own rows (the masked rows pass none)."""

    def __init__(self, embedding, group=None):
        super().__init__()
        if (embedding.max_norm is not None or embedding.scale_grad_by_freq
                or embedding.sparse):
            raise ValueError("tensor_parallel: a vocab-parallel embedding takes no max_norm, "
                             "scale_grad_by_freq or sparse gradients")
        rank, size = _group_rank_size(group)
        self.group = group
        self.num_embeddings = embedding.num_embeddings // size
        self.embedding_dim = embedding.embedding_dim
        self.start = rank * self.num_embeddings
        self.weight = nn.Parameter(shard(embedding.weight.detach(), 0, group),
                                   requires_grad=embedding.weight.requires_grad)
        pad = embedding.padding_idx
        self.padding_idx = (pad - self.start
                            if pad is not None and 0 <= pad - self.start < self.num_embeddings
                            else None)

    def forward(self, ids):
        local = ids - self.start
        outside = (local < 0) | (local >= self.num_embeddings)
        rows = nn.functional.embedding(local.masked_fill(outside, 0), self.weight,
                                       self.padding_idx)
        rows = rows.masked_fill(outside.unsqueeze(-1), -0.0)
        if torch.is_grad_enabled() and rows.requires_grad:
            return _AllReduceForward.apply(rows, self.group)
        rows = rows.contiguous()
        dist.all_reduce(rows, group=self.group)
        return rows

    def extra_repr(self):
        return (f"{self.num_embeddings} (per rank, from {self.start}), {self.embedding_dim}"
                f"{'' if self.padding_idx is None else f', padding_idx={self.padding_idx}'}")


_STYLES = {
    "colwise": ColumnParallelLinear,
    "colwise_gather": lambda linear, group: ColumnParallelLinear(linear, group, True),
    "rowwise": RowParallelLinear,
    "vocab": VocabParallelEmbedding,
}
_STYLE_TYPES = {"colwise": nn.Linear, "colwise_gather": nn.Linear, "rowwise": nn.Linear,
                "vocab": nn.Embedding}


def parallelize(module, plan, group=None):
    """Replaces the submodules named in plan ({"layer.q_proj": "colwise", "embed": "vocab",
    ...}; styles "colwise", "colwise_gather", "rowwise" of an nn.Linear, "vocab" of an
    nn.Embedding) by their sharded forms, in place; returns module. Everything not named stays
    replicated. Shard before moving to the card to copy only the blocks."""
    for name, style in plan.items():
        parent_name, _, child = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        sub = getattr(parent, child)
        if style not in _STYLES:
            raise ValueError(f"tensor_parallel: style {style!r} of {name} is not one of "
                             f"{sorted(_STYLES)}")
        kind = _STYLE_TYPES[style]
        if not isinstance(sub, kind):
            raise TypeError(f"tensor_parallel: {name} is a {type(sub).__name__}, not "
                            f"{'a Linear' if kind is nn.Linear else 'an Embedding'} "
                            f"(style {style!r})")
        setattr(parent, child, _STYLES[style](sub, group))
    return module
