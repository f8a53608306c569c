"""Small transformer blocks with deterministic random weights, written with plain torch ops so
the same module runs on the CPU and, after ``.to("spyre")``, on a Spyre card. Used by
test_models.py and tools/decoder_demo.py.

- ``TinyGranite``: token embedding, one Granite-style decoder layer (RMSNorm, grouped-query
  attention with rotary position embedding and a KV cache, SwiGLU MLP), final RMSNorm and an
  LM head; ``generate`` runs a prefill and greedy decode steps.
  A decode step can also take its position as a device tensor (``DecodeStep``, ``kv_bucket``,
  ``generate_static``):
  the attention then runs over a fixed bucket of the cache with a mask, so one captured graph
  serves every position of the bucket (Documentation/torch_compile.md "Growing KV cache").
- ``tensor_parallel``: TinyGranite or Granite sharded Megatron-style over a process group
  (torch_spyre.tensor_parallel's linears; heads, KV heads and KV caches split over the ranks).
- ``BertEncoderLayer``: post-norm self-attention and GELU MLP with LayerNorm.
"""

import torch
import torch.nn.functional as F
from torch import nn

import torch_spyre
from torch_spyre.tensor_parallel import parallelize, shard


def rope_tables(max_len, head_dim, base=10000.0):
    """cos and sin [max_len, head_dim] for the rotate-half convention."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(max_len, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


class GraniteDecoderLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, intermediate, max_len, eps=1e-5, batch=1):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        d = self.head_dim
        self.input_norm = nn.RMSNorm(hidden, eps=eps)
        self.q_proj = nn.Linear(hidden, heads * d, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * d, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * d, bias=False)
        self.o_proj = nn.Linear(heads * d, hidden, bias=False)
        self.post_norm = nn.RMSNorm(hidden, eps=eps)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        cos, sin = rope_tables(max_len, d)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        # the KV cache of `batch` sequences (the tensor-position form below takes batch 1)
        self.register_buffer("k_cache", torch.zeros(batch, kv_heads, max_len, d),
                             persistent=False)
        self.register_buffer("v_cache", torch.zeros(batch, kv_heads, max_len, d),
                             persistent=False)
        # the position of each cache entry, compared with a device-side position
        self.register_buffer("key_pos", torch.arange(max_len), persistent=False)

    def forward(self, x, pos, kv_len=None):
        """x [1, L, hidden] at positions pos .. pos+L-1 (pos 0: a prefill, causal).

        pos may instead be an int64 tensor [1] on x's device (a one-token decode, L = 1): the
        token's entry is written at pos (index_copy_) and the attention runs over the first
        kv_len cache entries (a bucket, kv_len > pos) with the entries after pos masked out.
        Nothing of the step then depends on the position's value on the host, so one graph
        (Dynamo's and a captured one) serves every position of a bucket."""
        b, L, _ = x.shape
        h = self.input_norm(x)
        q = self.q_proj(h).view(b, L, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, L, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, L, self.kv_heads, self.head_dim).transpose(1, 2)
        # plain bools: under torch.compile(dynamic=True) sizes and module ints are symbolic
        causal, gqa = L > 1, self.heads != self.kv_heads
        if isinstance(pos, torch.Tensor):
            cos, sin = F.embedding(pos, self.cos), F.embedding(pos, self.sin)
            q, k = torch_spyre.rotary(q, cos, sin), torch_spyre.rotary(k, cos, sin)
            entries = self.key_pos[:kv_len]
            self.k_cache.index_copy_(2, pos, k)
            self.v_cache.index_copy_(2, pos, v)
            keys, values = self.k_cache[:, :, :kv_len], self.v_cache[:, :, :kv_len]
            mask = (entries <= pos).view(1, 1, 1, -1)
            a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                               enable_gqa=True if gqa else False)
        else:
            cos, sin = self.cos[pos:pos + L], self.sin[pos:pos + L]
            q, k = torch_spyre.rotary(q, cos, sin), torch_spyre.rotary(k, cos, sin)
            self.k_cache[:, :, pos:pos + L] = k
            self.v_cache[:, :, pos:pos + L] = v
            keys, values = self.k_cache[:, :, :pos + L], self.v_cache[:, :, :pos + L]
            a = F.scaled_dot_product_attention(q, keys, values,
                                               is_causal=True if causal else False,
                                               enable_gqa=True if gqa else False)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, L, self.heads * self.head_dim))
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class TinyGranite(nn.Module):
    def __init__(self, vocab=512, hidden=512, heads=8, kv_heads=2, intermediate=1024,
                 max_len=64, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(vocab, hidden)
        self.layer = GraniteDecoderLayer(hidden, heads, kv_heads, intermediate, max_len)
        self.norm = nn.RMSNorm(hidden, eps=1e-5)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.RMSNorm):  # not all ones: the weights matter
                    m.weight.uniform_(0.5, 1.5)

    def forward(self, tokens, pos, kv_len=None):
        """Logits [1, L, vocab] for tokens [1, L] at positions pos.. (pos and kv_len: see
        GraniteDecoderLayer.forward)."""
        return self.lm_head(self.norm(self.layer(self.embed(tokens), pos, kv_len)))

    @torch.no_grad()
    def generate(self, prompt, steps):
        """Greedy decoding: prefill prompt [1, L], then `steps` decode steps. Returns the
        generated tokens [1, steps] and the logits of every step (prefill last position
        first)."""
        logits = self(prompt, 0)[:, -1]
        out_logits, tokens = [logits], []
        pos = prompt.shape[1]
        for _ in range(steps):
            nxt = logits.argmax(-1, keepdim=True)
            tokens.append(nxt)
            logits = self(nxt, pos)[:, -1]
            out_logits.append(logits)
            pos += 1
        return torch.cat(tokens, 1), out_logits


class Granite(nn.Module):
    """A Granite-shaped decoder-only model: `layers` GraniteDecoderLayers, final RMSNorm and an
    untied LM head; KV caches for `batch` sequences. The weights are not initialised here: build
    it on the meta device and move it with ``to_empty`` (compile_bench.py granite, timing-only)."""

    def __init__(self, vocab, hidden, heads, kv_heads, intermediate, layers, max_len, batch=1):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            GraniteDecoderLayer(hidden, heads, kv_heads, intermediate, max_len, batch=batch)
            for _ in range(layers))
        self.norm = nn.RMSNorm(hidden, eps=1e-5)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens, pos):
        """Logits [B, L, vocab] for tokens [B, L] at host positions pos .. pos + L - 1."""
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, pos)
        return self.lm_head(self.norm(x))


def tensor_parallel(model, group=None, vocab_parallel=False):
    """Shards a TinyGranite or Granite in place over the ranks of group (world size dividing
    its heads and KV heads): q/k/v and gate/up column-parallel, o and down row-parallel (one
    all_reduce each), each rank keeping heads/size query heads and the kv_heads/size KV heads
    they read (contiguous blocks keep the grouped-query pairing) with their KV caches; norms
    replicated; the embedding and the LM head replicated or, with vocab_parallel, split over the
    vocabulary (the embedding's rows summed by an all_reduce, the LM head column-parallel with
    its logits all-gathered). Build the model on the CPU (the same seed on every rank), shard,
    then move it to the card. Returns model."""
    size = torch.distributed.get_world_size(group)
    layers = {"layer": model.layer} if hasattr(model, "layer") else {
        f"layers.{i}": layer for i, layer in enumerate(model.layers)}
    plan = {"embed": "vocab", "lm_head": "colwise_gather"} if vocab_parallel else {}
    for prefix, layer in layers.items():
        if layer.heads % size or layer.kv_heads % size:
            raise ValueError(f"{layer.heads} heads and {layer.kv_heads} KV heads do not split "
                             f"over {size} ranks")
        plan.update({f"{prefix}.{n}": "colwise"
                     for n in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")})
        plan.update({f"{prefix}.o_proj": "rowwise", f"{prefix}.down_proj": "rowwise"})
        layer.heads //= size
        layer.kv_heads //= size
        layer.k_cache = shard(layer.k_cache, 1, group)
        layer.v_cache = shard(layer.v_cache, 1, group)
    return parallelize(model, plan, group)


def kv_bucket(pos, bucket=16, max_len=64):
    """The cache length a decode at position pos attends over: pos + 1 rounded up to a multiple
    of bucket (one graph per bucket), at most max_len."""
    return min(max_len, (pos // bucket + 1) * bucket)


class DecodeStep(nn.Module):
    """One greedy decode step whose state stays on the card: the logits of tok [1, 1] at the
    position pos (int64 [1]), then the next token written into tok and pos advanced by one.
    The host picks kv_len (kv_bucket) from the position it counts itself, never reading the
    card, so a loop of steps is a loop of replays of one graph per bucket."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tok, pos, kv_len):
        logits = self.model(tok, pos, kv_len)[:, -1]
        tok.copy_(logits.argmax(-1, keepdim=True))
        pos.add_(1)
        return logits


@torch.no_grad()
def generate_static(model, step, prompt, steps, bucket=16):
    """Greedy decoding as TinyGranite.generate, the decode steps through step (a DecodeStep,
    compiled or not) with device-side token and position. Returns the same as generate."""
    logits = model(prompt, 0)[:, -1]
    tok = logits.argmax(-1, keepdim=True)
    pos = torch.full((1,), prompt.shape[1], dtype=torch.int64, device=prompt.device)
    out_logits, tokens = [logits], []
    for p in range(prompt.shape[1], prompt.shape[1] + steps):
        tokens.append(tok.clone())
        out_logits.append(step(tok, pos, kv_bucket(p, bucket)).clone())
    return torch.cat(tokens, 1), out_logits


class BertEncoderLayer(nn.Module):
    def __init__(self, hidden=256, heads=4, intermediate=1024, seed=0, eps=1e-12):
        super().__init__()
        torch.manual_seed(seed)
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=eps)
        with torch.no_grad():
            for m in (self.attn_norm, self.out_norm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)

    def forward(self, x, mask=None):
        """x [B, L, hidden]; mask an additive float mask broadcast to [B, heads, L, L]."""
        b, L, hid = x.shape

        def heads(t):
            return t.view(b, L, self.heads, self.head_dim).transpose(1, 2)

        a = F.scaled_dot_product_attention(heads(self.query(x)), heads(self.key(x)),
                                           heads(self.value(x)), attn_mask=mask)
        x = self.attn_norm(x + self.attn_out(a.transpose(1, 2).reshape(b, L, hid)))
        return self.out_norm(x + self.output(F.gelu(self.intermediate(x))))
