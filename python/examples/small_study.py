"""A small study from Python: GRPO with and without Routing Replay R3 on the toy MoE under a
bf16 rollout engine, 3 seeds x 20 steps, then one figure from its frames (mean reward per step
per arm). Run from the repository root: python python/examples/small_study.py [OUT]"""

import sys

import polars as pl

import driftlab

out = sys.argv[1] if len(sys.argv) > 1 else "results/py-small-study"
spec = {
    "name": "py_small_study",
    "description": "GRPO with and without R3 under a bf16 engine (an example of driftlab from Python)",
    "preset": "toy",
    "seeds": [0, 1, 2],
    "steps": 20,
    "eval_every": 10,
    "task": {"kind": "sort", "min_len": 4, "max_len": 16},
    "rl": {"batch_prompts": 16, "group_size": 8, "minibatches": 4, "mismatch": {"kind": "bf16"}},
    "arms": [
        {"name": "grpo", "algorithm": {"kind": "grpo"}},
        {"name": "grpo_r3", "algorithm": {"kind": "grpo"}, "routing": "r3"},
    ],
}
print(len(driftlab.validate(spec)), "cells")
run = driftlab.run(spec, out=out, jobs=2)
steps = run.frames["steps"].collect()
curve = steps.group_by(["arm", "step"]).agg(pl.col("reward_mean").mean()).sort(["arm", "step"])
print(steps.group_by("arm").agg(pl.col("mismatch_kl_k3").mean()))

import matplotlib  # noqa: E402  (only the figure needs it)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

for arm, g in curve.group_by("arm", maintain_order=True):
    plt.plot(g["step"], g["reward_mean"], label=arm[0])
plt.xlabel("RL step")
plt.ylabel("mean reward (3 seeds)")
plt.legend()
plt.savefig(f"{out}/reward_py.png", dpi=120)
print("wrote", f"{out}/reward_py.png")
