"""Notebook users read driftlab's Parquet files with Python polars: check they can.

Usage: python tests/python/check_frames.py RESULTS_DIR
Checks the identity columns, the documented metric columns and their types in every frame.
"""
import sys

import polars as pl

IDENTITY = {"experiment": pl.String, "regime": pl.String, "arm": pl.String, "algorithm": pl.String, "routing": pl.String, "seed": pl.Int64, "step": pl.Int64}
FLOATS = {
    "steps": ["reward_mean", "reward_std", "accuracy", "eval_accuracy", "resp_len_mean", "entropy", "frac_zero_adv_groups",
              "mismatch_kl_k3", "mismatch_extreme_frac", "mismatch_route_frac", "load_max_violation", "t_rollout", "t_update", "t_probe"],
    "updates": ["ratio_tok_mean", "ratio_tok_var", "ratio_tok_max", "ratio_tok_min", "logratio_tok_var", "ratio_seq_var",
                "logratio_within_seq_var", "ess", "clip_frac_tok", "clip_frac_low", "clip_frac_high", "clip_frac_seq", "kl_old",
                "kl_ref", "grad_norm", "loss_policy", "loss_aux", "drift_expert_frac", "drift_token_frac", "drift_flips_per_token",
                "drift_since_rollout_frac", "router_js"],
    "layers": ["drift_expert_frac", "drift_token_frac", "drift_since_rollout_frac", "router_js", "router_entropy", "load_max_violation"],
    "events": ["value", "threshold"],
}
INTS = {"steps": ["dead_experts", "n_tokens"], "updates": ["minibatch", "n_tokens"], "layers": ["minibatch", "layer", "dead_experts"], "events": []}


def main(root: str) -> int:
    failed = 0
    for name in FLOATS:
        df = pl.read_parquet(f"{root}/{name}.parquet")
        want = dict(IDENTITY)
        want.update({c: pl.Float64 for c in FLOATS[name]})
        want.update({c: pl.Int64 for c in INTS[name]})
        if name == "events":
            want.update({"kind": pl.String, "detail": pl.String})
        for col, dtype in want.items():
            if col not in df.columns:
                print(f"FAIL {name}: missing column {col}")
                failed += 1
            elif df.schema[col] != dtype:
                print(f"FAIL {name}: {col} is {df.schema[col]}, expected {dtype}")
                failed += 1
        if name != "events" and df.height == 0:
            print(f"FAIL {name}: no rows")
            failed += 1
        print(f"{name}: {df.height} rows, {len(df.columns)} columns")
    print(f"interop: {len(FLOATS) - min(failed, len(FLOATS))} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
