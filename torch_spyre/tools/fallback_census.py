"""Fallback census (issue 23): which aten ops of everyday PyTorch programs still run on the CPU.

A fixed corpus of programs written for this census, each run on spyre (simulator backend) with
torch_spyre's fallback counters reset before and read after, and its result compared with the
same program on the CPU. The target is zero fallbacks in every program; the table says which ops
remain, how often each was called, and whether the program still gives the CPU's answer.

    tools/in-sysroot 'SPYRE_BACKEND=sim PYTHONPATH=build/cmake/torch_spyre/python \\
        python3 torch_spyre/tools/fallback_census.py --json build/bench/fallback_census.json'

A program that raises on spyre is reported with its error (e.g. autocast before it exists);
that is a finding, not a crash of the census.
"""

import argparse
import json
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import torch_spyre

# --- the corpus -----------------------------------------------------------------------------


class Decoder(nn.Module):
    """A LLaMA-style decoder: embedding, RMSNorm, attention with a boolean causal mask and a KV
    cache updated with index_copy_, SwiGLU MLP, LM head."""

    def __init__(self, vocab=96, hidden=64, heads=4, inter=128, max_len=32):
        super().__init__()
        self.heads, self.hd = heads, hidden // heads
        self.emb = nn.Embedding(vocab, hidden)
        self.norm1, self.norm2, self.norm_f = (nn.RMSNorm(hidden) for _ in range(3))
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.gate = nn.Linear(hidden, inter, bias=False)
        self.up = nn.Linear(hidden, inter, bias=False)
        self.down = nn.Linear(inter, hidden, bias=False)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.register_buffer("k_cache", torch.zeros(1, heads, max_len, self.hd), persistent=False)
        self.register_buffer("v_cache", torch.zeros(1, heads, max_len, self.hd), persistent=False)

    def forward(self, ids, pos):
        b, L = ids.shape
        positions = torch.arange(pos, pos + L, device=ids.device)
        x = self.emb(ids)
        h = self.norm1(x)
        q, k, v = self.qkv(h).view(b, L, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4)
        # under autocast the projections are 16-bit: the cache keeps its own type
        self.k_cache.index_copy_(2, positions, k.to(self.k_cache.dtype))
        self.v_cache.index_copy_(2, positions, v.to(self.v_cache.dtype))
        n = pos + L
        keys, values = self.k_cache[:, :, :n], self.v_cache[:, :, :n]
        key_pos = torch.arange(n, device=ids.device)
        mask = key_pos[None, :] <= positions[:, None]  # boolean causal mask
        a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, L, -1))
        h = self.norm2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return self.head(self.norm_f(x))


def generate(device):
    """Prefill then 6 decode steps: greedy argmax, and top-k sampling from a seeded generator
    (compared only by shape and range: the CPU and the card draw different streams)."""
    torch.manual_seed(0)
    model = Decoder().eval().to(device)
    ids = torch.tensor([[3, 17, 42, 8, 61]], device=device)
    out, pos = [], 0
    with torch.no_grad():
        for _ in range(6):
            logits = model(ids, pos)[:, -1]
            pos += ids.shape[1]
            greedy = logits.argmax(-1, keepdim=True)
            top_v, top_i = torch.topk(logits, 5, dim=-1)
            probs = torch.softmax(top_v / 0.8, dim=-1)
            drawn = torch.gather(top_i, -1, torch.multinomial(probs, 1))
            assert 0 <= int(drawn) < 96
            out.append(greedy)
            ids = greedy
    return torch.cat(out, dim=-1)


def encoder(device):
    """nn.TransformerEncoder in eval with a key padding mask: its default (nested tensor) fast
    path."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True)
    model = nn.TransformerEncoder(layer, 2).eval().to(device)
    x = torch.randn(2, 10, 64).to(device)
    pad = torch.zeros(2, 10, dtype=torch.bool)
    pad[1, 7:] = True
    with torch.no_grad():
        y = model(x, src_key_padding_mask=pad.to(device))
    return y  # the nested path pads with zeros, on the CPU as on the card


def cnn(device):
    """A small CNN in eval: conv, batch norm, ReLU, max and adaptive average pooling, linear."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=2), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    for m in model:
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    model = model.eval().to(device)
    x = torch.randn(4, 3, 16, 16).to(device)
    with torch.no_grad():
        return F.log_softmax(model(x), dim=-1)


def train(device):
    """Three AdamW steps of a decoder layer with dropout off (so the CPU gives the same answer):
    forward, cross-entropy, backward, optimizer step."""
    torch.manual_seed(0)
    model = Decoder().train().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 96, (1, 12)).to(device)
    target = torch.randint(0, 96, (12,)).to(device)
    losses = []
    for _ in range(3):
        model.k_cache.detach_().zero_()  # the cache kept the last step's graph
        model.v_cache.detach_().zero_()
        loss = F.cross_entropy(model(ids, 0)[0], target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def autocast(device):
    """Inference of the decoder's prefill under torch.autocast in bfloat16."""
    torch.manual_seed(0)
    model = Decoder().eval().to(device)
    ids = torch.tensor([[3, 17, 42, 8, 61, 5, 9]], device=device)
    with torch.no_grad(), torch.autocast(device_type=torch.device(device).type,
                                         dtype=torch.bfloat16):
        return model(ids, 0).float()


def sort_scan(device):
    """Integer and index work around sampling and data preparation."""
    torch.manual_seed(0)
    x = torch.randn(8, 33).to(device)
    idx = torch.randint(0, 33, (8, 5)).to(device)
    parts = [
        torch.sort(x, dim=-1, stable=True).values, torch.argsort(x, dim=0).float(),
        torch.cumsum(x, dim=1), torch.gather(x, 1, idx),
        torch.zeros(8, 33, device=device).scatter_add(1, idx, torch.ones(8, 5, device=device)),
        torch.index_select(x, 1, idx[0]), (x > 0).sum(dim=1).float()[:, None],
        torch.tril(x[:, :8]).flatten()[None].expand(8, -1),
    ]
    return torch.cat([p.reshape(8, -1) for p in parts], dim=1)


def indexing(device):
    """The rest of the index family: histogram-style accumulation, masked writes, membership,
    reductions by index, vocabulary building, integer keys."""
    torch.manual_seed(0)
    x = torch.randn(6, 12).to(device)
    ids = torch.randint(0, 12, (20,)).to(device)
    hist = torch.zeros(12, device=device).index_put_((ids,), torch.ones(20, device=device),
                                                     accumulate=True)
    scattered = x.masked_scatter(x > 0, torch.arange(72.0, device=device))
    member = torch.isin(ids, torch.tensor([1, 4, 7], device=device)).float()
    group = torch.zeros(6, 4, device=device).scatter_reduce(
        1, ids[:12].view(6, 2) % 4, x[:, :2], "amax", include_self=False)
    vocab, inverse, counts = torch.unique(ids, sorted=True, return_inverse=True,
                                          return_counts=True)
    keys = torch.sort(ids, stable=True).values
    parts = [hist, scattered.flatten(), member, group.flatten(), vocab.float(), inverse.float(),
             counts.float(), keys.float()]
    return torch.cat(parts)


def cnn_train(device):
    """Two SGD steps (momentum, weight decay) of a small ResNet: a 7x7 stem, batch norm in
    training mode, an overlapping padded max pool, a residual block, global average pooling,
    cross-entropy; the gradients clipped by their norm."""
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):
            return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))

    model = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(3, 2, 1), Block(8), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 5)).train().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(4, 3, 32, 32).to(device)
    y = torch.tensor([0, 3, 1, 4]).to(device)
    losses = []
    for _ in range(2):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def segmentation(device):
    """A U-Net-style step: strided convs down, bilinear and nearest upsampling, skip
    concatenation, a per-pixel binary loss with logits, backward."""
    torch.manual_seed(0)
    down = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.LeakyReLU(0.1)).to(device)
    mid = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.Hardswish()).to(device)
    up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
    head = nn.Conv2d(11, 1, 1).to(device)
    x = torch.randn(2, 3, 16, 16).to(device)
    target = (torch.rand(2, 1, 16, 16) > 0.5).float().to(device)
    h = mid(down(x))
    logits = head(torch.cat([up(h), F.interpolate(x, scale_factor=1.0, mode="nearest")], 1))
    loss = F.binary_cross_entropy_with_logits(logits, target)
    loss.backward()
    return torch.stack([loss.detach(), down[0].weight.grad.norm(), head.weight.grad.norm()])


def embeddings(device):
    """Retrieval-style math: normalized embeddings, cosine similarities, a margin ranking with
    softplus, vector norms of several orders, a matrix-vector score."""
    torch.manual_seed(0)
    q, d = torch.randn(4, 32).to(device), torch.randn(10, 32).to(device)
    qn, dn = F.normalize(q, dim=-1), F.normalize(d, dim=-1)
    sim = qn @ dn.t()
    cos = F.cosine_similarity(q[:, None], d[None], dim=-1)
    margin = F.softplus(sim[:, :5] - sim[:, 5:] + 0.2).mean(dim=1)
    norms = torch.stack([torch.linalg.vector_norm(d, o, dim=1) for o in (1, 2, 3, float("inf"))])
    score = torch.mv(d, q[0])
    return torch.cat([sim.flatten(), cos.flatten(), margin, norms.flatten(), score,
                      torch.logaddexp(sim[0], sim[1]), torch.atan2(q[0], q[1])])


def recurrent(device):
    """Two Adam steps of a sequence classifier: an embedding, a 2-layer LSTM and a GRU over its
    output, the last step's state into a linear head, cross-entropy."""
    torch.manual_seed(0)
    emb = nn.Embedding(50, 16)
    lstm = nn.LSTM(16, 24, num_layers=2, batch_first=True)
    gru = nn.GRU(24, 24, batch_first=True)
    head = nn.Linear(24, 4)
    mods = nn.ModuleList([emb, lstm, gru, head]).to(device)
    opt = torch.optim.Adam(mods.parameters(), lr=1e-2)
    ids = torch.randint(0, 50, (3, 9)).to(device)
    y = torch.tensor([1, 3, 0]).to(device)
    losses = []
    for _ in range(2):
        out, _ = lstm(emb(ids))
        _, h = gru(out)
        loss = F.cross_entropy(head(h[-1]), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.cat([torch.stack(losses), head.weight.detach().flatten()])


def vision_train(device):
    """Two AdamW steps (a cosine schedule) of a small vision transformer: a patch convolution,
    GroupNorm, a class token, a pre-norm encoder layer with GELU, label smoothing against
    one-hot mixed targets (mixup-style soft labels)."""
    torch.manual_seed(0)
    patch = nn.Conv2d(3, 32, 4, 4)
    norm = nn.GroupNorm(4, 32)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
    head = nn.Linear(32, 5)
    mods = nn.ModuleList([patch, norm, layer, head]).to(device)
    cls = nn.Parameter(torch.zeros(1, 1, 32).to(device))
    opt = torch.optim.AdamW(list(mods.parameters()) + [cls], lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 4)
    x = torch.randn(2, 3, 16, 16).to(device)
    a, b = torch.tensor([1, 4]).to(device), torch.tensor([0, 2]).to(device)
    target = 0.7 * F.one_hot(a, 5).float() + 0.3 * F.one_hot(b, 5).float()
    losses = []
    for _ in range(2):
        t = norm(patch(x)).flatten(2).transpose(1, 2)
        t = layer(torch.cat([cls.expand(2, 1, 32), t], 1))
        loss = F.cross_entropy(head(t[:, 0]), target, label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.detach())
    return torch.cat([torch.stack(losses), head.weight.detach().flatten()])


def moe(device):
    """Mixture-of-experts routing: top-2 of the gate's softmax, renormalized weights, the tokens
    of each expert found with where, gathered with x[tok] and w[tok, slot], the expert outputs
    added back with index_add_, the load-balancing loss from bincount."""
    torch.manual_seed(0)
    x = torch.randn(16, 8).to(device)
    gate = nn.Linear(8, 4).to(device)
    experts = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)]).to(device)
    probs = F.softmax(gate(x), -1)
    w, idx = torch.topk(probs, 2, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(4):
        tok, slot = torch.where(idx == e)
        out.index_add_(0, tok, experts[e](x[tok]) * w[tok, slot, None])
    counts = torch.bincount(idx.flatten(), minlength=4)
    aux = (counts.float() / counts.sum() * probs.mean(0)).sum()
    return torch.cat([out.flatten(), aux[None]])


def vae(device):
    """A VAE step: a tanh encoder, the reparameterized latent (a fixed noise), a sigmoid
    decoder, binary cross-entropy plus the KL term, backward."""
    torch.manual_seed(0)
    enc, dec = nn.Linear(20, 8).to(device), nn.Linear(4, 20).to(device)
    x = torch.rand(5, 20).to(device)
    mu, logvar = torch.tanh(enc(x)).chunk(2, -1)
    z = mu + torch.exp(0.5 * logvar) * 0.1
    rec = torch.sigmoid(dec(z))
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    loss = F.binary_cross_entropy(rec, x, reduction="sum") + kl
    loss.backward()
    return torch.cat([loss.detach()[None], enc.weight.grad.flatten(), dec.bias.grad])


def vocab_train(device):
    """Two AdamW steps of a small language model with a real vocabulary (49,152 tokens, as
    Granite 3): the embedding and LM head past a core's scratchpad (the embedding gradient's
    scatter), cross-entropy over the vocabulary, clip_grad_norm_, then top-p over the last
    position's probabilities (a sort of 49,152 values and its cumulative sum)."""
    torch.manual_seed(0)
    V, H = 49152, 64
    emb, head = nn.Embedding(V, H).to(device), nn.Linear(H, V, bias=False).to(device)
    norm = nn.RMSNorm(H).to(device)
    params = [*emb.parameters(), *head.parameters(), *norm.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-2)
    ids = torch.randint(0, V, (2, 17)).to(device)
    out = []
    for _ in range(2):
        logits = head(norm(emb(ids[:, :-1])))
        loss = F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        out.append(torch.nn.utils.clip_grad_norm_(params, 1.0)[None])
        opt.step()
        out.append(loss.detach()[None])
    probs, order = logits[:, -1].detach().softmax(-1).sort(-1, descending=True)
    keep = probs.cumsum(-1) <= 0.9
    out += [probs[:, :8].flatten(), order[:, :8].flatten().float(), keep.sum(-1).float()]
    return torch.cat(out)


def gan(device):
    """Two steps of a DCGAN-style pair: the generator's transposed convolutions, batch norm,
    ReLU and tanh; the discriminator's strided convolutions, PReLU, a local response norm (an
    average pool over channels), batch norm and LeakyReLU; BCE with logits for both players;
    Adam with beta1 = 0.5 for each."""
    torch.manual_seed(0)
    gen = nn.Sequential(nn.ConvTranspose2d(8, 16, 4, 1, 0, bias=False), nn.BatchNorm2d(16),
                        nn.ReLU(), nn.ConvTranspose2d(16, 8, 4, 2, 1, bias=False),
                        nn.BatchNorm2d(8), nn.ReLU(), nn.ConvTranspose2d(8, 3, 4, 2, 1, bias=False),
                        nn.Tanh()).to(device)
    disc = nn.Sequential(nn.Conv2d(3, 8, 4, 2, 1), nn.PReLU(8), nn.LocalResponseNorm(3),
                         nn.Conv2d(8, 16, 4, 2, 1, bias=False), nn.BatchNorm2d(16),
                         nn.LeakyReLU(0.2), nn.Conv2d(16, 1, 4, 1, 0)).to(device)
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    z = torch.randn(4, 8, 1, 1).to(device)
    real = (torch.rand(4, 3, 16, 16) * 2 - 1).to(device)
    ones, zeros = torch.ones(4).to(device), torch.zeros(4).to(device)
    out = []
    for _ in range(2):
        fake = gen(z)
        d_loss = (F.binary_cross_entropy_with_logits(disc(real).flatten(), ones) +
                  F.binary_cross_entropy_with_logits(disc(fake.detach()).flatten(), zeros))
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        g_loss = F.binary_cross_entropy_with_logits(disc(fake).flatten(), ones)
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
        out += [d_loss.detach(), g_loss.detach()]
    return torch.cat([torch.stack(out), fake.detach().flatten()[:16]])


CORPUS = {"generate": generate, "encoder": encoder, "cnn": cnn, "train": train,
          "autocast": autocast, "sort_scan": sort_scan, "indexing": indexing,
          "cnn_train": cnn_train, "segmentation": segmentation, "embeddings": embeddings,
          "recurrent": recurrent, "vision_train": vision_train, "moe": moe, "vae": vae,
          "vocab_train": vocab_train, "gan": gan}
TOLERANCE = {"autocast": 5e-2, "train": 1e-3, "cnn_train": 1e-3, "segmentation": 1e-3,
             "recurrent": 1e-3, "vision_train": 1e-3, "moe": 1e-4, "vae": 1e-3,
             "vocab_train": 1e-3, "gan": 1e-3}

# --- the census -----------------------------------------------------------------------------


def run(name, fn):
    """One program on spyre and on the CPU: fallback counts, error, agreement."""
    torch_spyre.reset_fallback_counts()
    torch_spyre._C._reset_copy_stats()
    row = {"program": name, "error": None, "matches_cpu": None}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = fn("spyre")
            torch.spyre.synchronize()
            got = got.cpu()
    except Exception as e:  # a finding, reported in the table
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        got = None
    counts = dict(torch_spyre.fallback_counts())
    row["fallbacks"] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    row["fallback_calls"] = sum(counts.values())
    # device data that went to the host and back for a copy no card path took (a silent
    # round trip: not CPU compute, so not a fallback, but as slow)
    row["host_round_trips"] = torch_spyre._C._copy_stats()["through_host"]
    if got is not None:
        try:
            want = fn("cpu")
            tol = TOLERANCE.get(name, 1e-4)
            row["matches_cpu"] = bool(want.shape == got.shape and torch.allclose(
                got.double(), want.double(), rtol=tol, atol=tol))
        except Exception as e:
            row["error"] = f"CPU reference failed: {type(e).__name__}: {e}"
    return row


def markdown(rows):
    lines = ["| program | result | fallback calls | ops on the CPU (calls) | device copies through "
             "the host |", "|---|---|---|---|---|"]
    for r in rows:
        result = (f"error: {r['error']}" if r["error"] else
                  "matches CPU" if r["matches_cpu"] else "DIFFERS from CPU")
        ops = ", ".join(f"`{k}` ({v})" for k, v in r["fallbacks"].items()) or "none"
        lines.append(f"| {r['program']} | {result} | {r['fallback_calls']} | {ops} | "
                     f"{r['host_round_trips']} |")
    distinct = sorted({k for r in rows for k in r["fallbacks"]})
    lines.append("")
    lines.append(f"{len(distinct)} distinct ops fall back over the corpus; "
                 f"{sum(r['fallback_calls'] for r in rows)} fallback calls in all; "
                 f"{sum(r['host_round_trips'] for r in rows)} device copies through the host; "
                 f"{sum(1 for r in rows if r['error'])} programs raise on spyre; "
                 f"{sum(1 for r in rows if r['matches_cpu'] is False)} differ from the CPU.")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--markdown", help="write the table here")
    ap.add_argument("programs", nargs="*", help=f"some of: {' '.join(CORPUS)} (default all)")
    args = ap.parse_args()
    unknown = set(args.programs) - set(CORPUS)
    if unknown:
        ap.error(f"unknown programs: {' '.join(sorted(unknown))}")
    rows = [run(n, CORPUS[n]) for n in (args.programs or CORPUS)]
    table = markdown(rows)
    print(table)
    for path in filter(None, (args.json, args.markdown)):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    return 1 if any(r["matches_cpu"] is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
