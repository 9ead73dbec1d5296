"""PyTorch eager reference for `driftlab --threads T bench --rl --layer-only` (the toy RL step
with probe and reference off): the same work in plain PyTorch, so the two can be timed side by
side on one machine. Prints the median seconds of 15 steps after 2 warm-ups.

    python scripts/torch_rl_step.py [THREADS]     # THREADS: torch.set_num_threads, default 2

The step, as driftlab's: toy model (2 layers, d 64, 4 heads, RoPE, RMSNorm, MoE 8 experts
top-2 with renormalised gates, SwiGLU d_ff 128, vocabulary 17), sort prompts of 4-16 digits
(`S` + digits + `=`, left-padded), B 16 prompts x G 8 responses, N 4 minibatches of 2
micro-batches each. Rollout: prefill and one decoding step per position with a KV cache over
all 128 rows, sampling from the softmax, each row's response as long as a correct answer (its
digits and EOS, so the lengths match a trained model's). pi_old: one no-grad forward per
micro-batch. Each minibatch: forward+backward per micro-batch (GRPO's clipped token ratio loss,
token mean, plus 1e-3 x the load-balancing loss), gradient-norm clipping at 1, one AdamW step.
Padding tokens are not dispatched to experts; attention masks padded keys and the future.

Needs a Python with torch (`pip install torch numpy`); driftlab itself never imports it.
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
V, D, H, L, E, K, FF = 17, 64, 4, 2, 8, 2, 128
HD = D // H
B, G, N, MICRO = 16, 8, 4, 2
EPS, CLIP, AUX = 1e-5, 0.2, 1e-3


def param(*shape, std):
    return (torch.randn(*shape) * std).requires_grad_()


W = {"embed": param(V, D, std=0.02), "head": param(D, V, std=D**-0.5), "norm": torch.ones(D, requires_grad=True)}
for l in range(L):
    W[f"an{l}"] = torch.ones(D, requires_grad=True)
    W[f"fn{l}"] = torch.ones(D, requires_grad=True)
    W[f"qkv{l}"] = param(D, 3 * D, std=D**-0.5)
    W[f"o{l}"] = param(D, D, std=D**-0.5)
    W[f"r{l}"] = param(D, E, std=D**-0.5)
    W[f"w1{l}"] = [param(D, FF, std=D**-0.5) for _ in range(E)]
    W[f"w3{l}"] = [param(D, FF, std=D**-0.5) for _ in range(E)]
    W[f"w2{l}"] = [param(FF, D, std=FF**-0.5) for _ in range(E)]
PARAMS = [p for v in W.values() for p in (v if isinstance(v, list) else [v])]
OPT = torch.optim.AdamW(PARAMS, lr=1e-4, weight_decay=0.0)
inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2).float() / HD))
ang = torch.arange(160).float()[:, None] * inv[None]
COS, SIN = ang.cos(), ang.sin()


def rms(x, g):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * g


def rope(x, pos):  # x [b, h, s, hd]
    c, s = COS[pos], SIN[pos]
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)


def moe(x, active, l):  # x [T, D]; returns output and the load-balancing loss
    p = torch.softmax(x @ W[f"r{l}"], 1)
    v, idx = p.topk(K, 1)
    v = v / v.sum(1, keepdim=True)
    act = active.nonzero().squeeze(1)
    out = torch.zeros_like(x)
    fi, fv = idx[act].reshape(-1), v[act].reshape(-1)
    counts = torch.bincount(fi, minlength=E).float()
    for e in range(E):
        sl = (fi == e).nonzero().squeeze(1)
        if sl.numel() == 0:
            continue
        tok = act[sl // K]
        xi = x[tok]
        h = (F.silu(xi @ W[f"w1{l}"][e]) * (xi @ W[f"w3{l}"][e])) @ W[f"w2{l}"][e]
        out = out.index_add(0, tok, h * fv[sl].unsqueeze(1))
    n = max(act.numel(), 1)
    aux = E * ((counts / (n * K)) * p[act].sum(0) / n).sum()
    return out, aux


def forward(tok, valid, key_valid, pos0=0, cache=None):
    """tok, valid [b, s]; key_valid [b, pos0 + s]; cache: per layer (k, v) or None."""
    b, s = tok.shape
    x = W["embed"][tok].reshape(b * s, D)
    pos = torch.arange(pos0, pos0 + s)
    kvn = pos0 + s
    allowed = key_valid[:, None, None, :] & (torch.arange(kvn)[None, :] <= pos[:, None])[None, None]
    allowed = allowed | (torch.arange(kvn)[None, :] == pos[:, None])[None, None]
    aux = 0.0
    for l in range(L):
        h = rms(x, W[f"an{l}"]) @ W[f"qkv{l}"]
        q, k, v = h.reshape(b, s, 3, H, HD).permute(2, 0, 3, 1, 4)
        q, k = rope(q, pos), rope(k, pos)
        if cache is not None:
            if cache[l] is not None:
                k = torch.cat([cache[l][0], k], 2)
                v = torch.cat([cache[l][1], v], 2)
            cache[l] = (k, v)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        x = x + a.transpose(1, 2).reshape(b * s, D) @ W[f"o{l}"]
        y, al = moe(rms(x, W[f"fn{l}"]), valid.reshape(-1), l)
        x = x + y
        aux = aux + al
    return (rms(x, W["norm"]) @ W["head"]).reshape(b, s, V), aux / L


def rollout():
    lens = torch.randint(4, 17, (B,)).repeat_interleave(G)
    pw = int(lens.max()) + 2
    prompts = torch.zeros(B * G, pw, dtype=torch.long)
    pvalid = torch.zeros(B * G, pw, dtype=torch.bool)
    for r, n in enumerate(lens.tolist()):
        prompts[r, pw - n - 2 :] = torch.randint(2, 17, (n + 2,))
        pvalid[r, pw - n - 2 :] = True
    want = lens + 1
    max_new = int(want.max())
    with torch.no_grad():
        cache = [None] * L
        logits, _ = forward(prompts, pvalid, pvalid, 0, cache)
        last, kvalid = logits[:, -1], pvalid
        resp = torch.zeros(B * G, max_new, dtype=torch.long)
        for t in range(max_new):
            nxt = torch.multinomial(torch.softmax(last, -1), 1).squeeze(1)
            resp[:, t] = nxt
            active = want > t + 1
            if t + 1 == max_new or not bool(active.any()):
                break
            kvalid = torch.cat([kvalid, active[:, None]], 1)
            logits, _ = forward(nxt[:, None], active[:, None], kvalid, pw + t, cache)
            last = logits[:, -1]
    seq = pw + max_new
    tok = torch.cat([prompts, resp], 1)
    ar = torch.arange(max_new)[None]
    valid = torch.cat([pvalid, ar < want[:, None]], 1)
    return tok, valid, want, pw, seq


def token_logp(logits, tok, valid, pw):
    lp = torch.log_softmax(logits[:, pw - 1 : -1], -1).gather(-1, tok[:, pw:, None]).squeeze(-1)
    return lp, valid[:, pw:]


def step():
    tok, valid, want, pw, seq = rollout()
    rows = B * G // (N * MICRO)
    parts = [slice(i * rows, (i + 1) * rows) for i in range(N * MICRO)]
    with torch.no_grad():
        old = [token_logp(forward(tok[p], valid[p], valid[p])[0], tok[p], valid[p], pw)[0] for p in parts]
    rewards = torch.rand(B, G)
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)).reshape(-1)
    for m in range(N):
        mb = parts[m * MICRO : (m + 1) * MICRO]
        n_tok = sum(int(valid[p][:, pw:].sum()) for p in mb)
        for j, p in enumerate(mb):
            logits, aux = forward(tok[p], valid[p], valid[p])
            lp, mask = token_logp(logits, tok[p], valid[p], pw)
            ratio = torch.exp(lp - old[m * MICRO + j])
            a = adv[p][:, None]
            surr = -torch.minimum(ratio * a, ratio.clamp(1 - CLIP, 1 + CLIP) * a)
            loss = (surr * mask).sum() / n_tok + AUX * aux / MICRO
            loss.backward()
        torch.nn.utils.clip_grad_norm_(PARAMS, 1.0)
        OPT.step()
        OPT.zero_grad()


for _ in range(2):
    step()
ts = []
for _ in range(15):
    t = time.perf_counter()
    step()
    ts.append(time.perf_counter() - t)
print(f"torch_rl_step_s {statistics.median(ts):.3f} ({torch.get_num_threads()} threads, torch {torch.__version__})")
