# The committed form of a c2_organic shard, after `driftlab slim --shard DIR`: its update frame
# keeps the rows of the primary arms (grpo, grpo_r2, grpo_r3) and empties (all null, in place,
# so the file keeps the schema's columns in order for `merge`) the float columns no report reads
# (`driftlab schema`: report_reads false); the layer, length and prefix frames stay out of git. Eight shards in this form
# hold ~1.9 MB each. Usage: python3 trim_shard.py results/c2_organic/shards/I-of-8
# (needs polars), then `git add -f` its config.json, status.json, steps.parquet,
# events.parquet and updates.parquet. After `merge`, config.json records the kept arms as
# "rows_kept": {"updates": ["grpo", "grpo_r2", "grpo_r3"]} (docs/cli.md), so the report's
# checks know the other arms' update rows were left out by design.
import sys, polars as pl
d = sys.argv[1]
drop = ['ratio_tok_mean', 'ratio_tok_min', 'logratio_tok_var', 'logratio_within_seq_var', 'ess', 'clip_frac_low', 'clip_frac_high', 'clip_frac_seq', 'kl_old', 'kl_ref', 'grad_norm', 'loss_policy', 'loss_aux', 'loss_total', 'router_shift_mean', 'router_shift_floored', 'drift_flips_per_token', 'router_js', 'drift_bias_expert_frac', 't_update', 't_probe']
u = pl.read_parquet(f"{d}/updates.parquet")
u = u.filter(pl.col("arm").is_in(["grpo", "grpo_r2", "grpo_r3"]))
u = u.select([pl.lit(None, dtype=pl.Float64).alias(c) if c in drop else pl.col(c) for c in u.columns])
u.write_parquet(f"{d}/updates.parquet", compression="zstd", compression_level=19)
print(u.shape)
