"""Notebook users read driftlab's Parquet files with Python polars: check they can.

Usage: python tests/python/check_frames.py SCHEMA_JSON RESULTS_DIR
SCHEMA_JSON is the output of `driftlab schema`: every frame's columns and dtypes. Each frame of
the run must have exactly those columns, in that order, with those dtypes.
"""
import json
import sys

import polars as pl

DTYPES = {"str": pl.String, "int": pl.Int64, "float": pl.Float64}


def main(schema_path: str, root: str) -> int:
    with open(schema_path) as f:
        frames = json.load(f)["frames"]
    failed = 0
    for frame in frames:
        name = frame["name"]
        df = pl.read_parquet(f"{root}/{name}.parquet")
        want = [(c["name"], DTYPES[c["dtype"]]) for c in frame["columns"]]
        got = list(df.schema.items())
        ok = True
        if [n for n, _ in got] != [n for n, _ in want]:
            print(f"FAIL {name}: columns {[n for n, _ in got]}, schema {[n for n, _ in want]}")
            ok = False
        for (col, dtype) in want:
            if col in df.columns and df.schema[col] != dtype:
                print(f"FAIL {name}: {col} is {df.schema[col]}, schema says {dtype}")
                ok = False
        if name != "events" and df.height == 0:
            print(f"FAIL {name}: no rows")
            ok = False
        failed += 0 if ok else 1
        print(f"{name}: {df.height} rows, {len(df.columns)} columns")
    if not frames:
        print("FAIL: the schema lists no frames")
        failed = 1
    print(f"interop: {len(frames) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
