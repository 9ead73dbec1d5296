"""Trim a study's shard folder for committing within the repository's results budget.

Usage: python scripts/trim_shard.py results/<study>/shards/<i>-of-<n> [COLUMN ...]

`driftlab slim --shard` keeps every column, since `driftlab merge` needs the whole schema. This
keeps the schema too, but nulls every metric column of the update frame except the per-update
ones named (default: drift in slots and in routers, token and sequence clip fractions), so the
merged report still draws drift and clipping per update; a null column costs almost nothing in
Parquet. The layer, length and prefix frames are left for the caller to move out (merge skips a
frame a shard lacks). The step, event, status and config files are untouched.
"""
import sys

import polars as pl

KEYS = ["experiment", "regime", "arm", "algorithm", "routing", "ffn", "old_logp",
        "rollout_staleness", "n_layers", "router", "router_shift", "seed", "step", "minibatch"]
DEFAULT = ["drift_expert_frac", "drift_router_frac", "clip_frac_tok", "clip_frac_seq"]

shard = sys.argv[1]
keep = set(KEYS + (sys.argv[2:] or DEFAULT))
path = f"{shard}/updates.parquet"
u = pl.read_parquet(path)
u = u.with_columns([pl.lit(None, dtype=u.schema[c]).alias(c) for c in u.columns if c not in keep])
u.write_parquet(path, compression="zstd", compression_level=19)
print(f"{path}: kept {sorted(keep & set(u.columns))}")
