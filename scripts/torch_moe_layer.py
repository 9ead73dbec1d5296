"""PyTorch eager reference for `driftlab bench --layer-only`: one MoE layer forward+backward at
the bench shape (tokens 4096, d 64, 8 experts, top-2, SwiGLU d_ff 128, loss mean(out^2)).
Prints the median ms of 15 iterations after 3 warm-ups.

    python scripts/torch_moe_layer.py [THREADS]     # THREADS: torch.set_num_threads, default 2

Needs a Python with torch (`pip install torch numpy`); driftlab itself never imports it.
"""
import statistics
import sys
import time

import torch

torch.manual_seed(0)
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
T, D, E, K, F = 4096, 64, 8, 2, 128
x = torch.randn(T, D, requires_grad=True)
wr = (torch.randn(D, E) * 0.1).requires_grad_()
w1 = [(torch.randn(D, F) * 0.1).requires_grad_() for _ in range(E)]
w3 = [(torch.randn(D, F) * 0.1).requires_grad_() for _ in range(E)]
w2 = [(torch.randn(F, D) * 0.1).requires_grad_() for _ in range(E)]


def step():
    p = torch.softmax(x @ wr, 1)
    v, idx = p.topk(K, 1)
    v = v / v.sum(1, keepdim=True)
    out = torch.zeros(T, D)
    fi, fv = idx.reshape(-1), v.reshape(-1)
    for i in range(E):
        sl = (fi == i).nonzero().squeeze(1)
        if sl.numel() == 0:
            continue
        tok = sl // K
        xi = x[tok]
        h = (torch.nn.functional.silu(xi @ w1[i]) * (xi @ w3[i])) @ w2[i]  # SwiGLU expert
        out = out.index_add(0, tok, h * fv[sl].unsqueeze(1))
    (out**2).mean().backward()


for _ in range(3):
    step()
ts = []
for _ in range(15):
    t = time.perf_counter()
    step()
    ts.append((time.perf_counter() - t) * 1000)
print(f"torch_moe_layer_ms {statistics.median(ts):.2f} ({torch.get_num_threads()} threads, torch {torch.__version__})")
