"""driftlab from Python: specs checked as the CLI checks them, a small run from a dict, its
frames as polars with the documented columns, an interrupted run resumed to the same frames,
and a committed folder opened. Run from the repository root: `pytest python/tests`."""

import os
import signal
import threading
import time
from pathlib import Path

import polars as pl
import pytest

import driftlab

ROOT = Path(__file__).resolve().parents[2]


def tiny(name="py_tiny", steps=6, seeds=(0, 1)):
    """A spec small enough for a test (the tests' tiny preset, 20 cold-start steps)."""
    return {
        "name": name,
        "description": "a test of the Python binding",
        "preset": "tiny",
        "seeds": list(seeds),
        "steps": steps,
        "eval_every": 2,
        "flush_every": 1,
        "flush_secs": 0,
        "task": {"kind": "sort", "min_len": 2, "max_len": 5, "eval_size": 16},
        "rl": {"batch_prompts": 4, "group_size": 4, "minibatches": 2},
        "coldstart": {"max_steps": 20, "batch_size": 16, "eval_every": 10, "target_accuracy": 2.0},
        "arms": [
            {"name": "grpo", "algorithm": {"kind": "grpo"}},
            {"name": "grpo_r3", "algorithm": {"kind": "grpo"}, "routing": "r3"},
        ],
    }


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_experiments_and_spec_read_the_committed_specs():
    names = driftlab.experiments()
    assert "moe_drift" in names and names["moe_drift"]
    s = driftlab.spec("moe_drift")
    assert s["name"] == "moe_drift" and s["arms"]


def test_validate_returns_the_cells_and_names_a_bad_key():
    cells = driftlab.validate(tiny())
    assert len(cells) == 4
    assert {c["arm"] for c in cells} == {"grpo", "grpo_r3"}
    bad = tiny()
    bad["rl"]["batch_promts"] = 4
    with pytest.raises(driftlab.SpecError, match="batch_promts"):
        driftlab.validate(bad)
    with pytest.raises(driftlab.SpecError, match="nope"):
        driftlab.validate(tiny(), arms=["nope"])
    with pytest.raises(driftlab.SpecError, match="no_such_spec"):
        driftlab.validate("no_such_spec")


def test_a_run_from_a_dict_gives_polars_frames_with_the_schema_columns(tmp_path):
    run = driftlab.run(tiny(), out=tmp_path / "run", cache_dir=tmp_path / "cache", progress=False)
    steps = run.frames["steps"].collect()
    assert steps.height == 4 * 6
    declared = {c["name"] for c in next(f for f in driftlab.schema()["frames"] if f["name"] == "steps")["columns"]}
    assert declared <= set(steps.columns)
    assert set(run.frames) >= {"steps", "updates", "events"}
    assert run.report_md.startswith("# driftlab report")
    assert len(run.status) == 4 and all(s["status"] == "ok" for s in run.status)
    assert run.figures


def _frames_without_timings(run):
    out = {}
    for name in ("steps", "updates"):
        df = run.frames[name].collect()
        df = df.drop([c for c in df.columns if c.startswith("t_")])
        out[name] = df.sort(["arm", "seed", "step"] + (["minibatch"] if "minibatch" in df.columns else []))
    return out


def test_an_interrupted_run_resumes_to_the_frames_of_a_whole_one(tmp_path):
    spec = tiny(name="py_resume", steps=40)
    whole = driftlab.run(spec, out=tmp_path / "whole", cache_dir=tmp_path / "cache", progress=False)
    part = tmp_path / "part"
    # A SIGINT to this process once the first cell is written (flush_secs = 0 writes
    # status.json at each cell's end), whatever the machine's speed: the binding turns it into
    # a stop after the current step, and KeyboardInterrupt once the finished cells are written.
    done = threading.Event()

    def interrupt_after_first_cell():
        while not done.is_set():
            try:
                if any(s["status"] == "ok" for s in driftlab.open(part).status):
                    os.kill(os.getpid(), signal.SIGINT)
                    return
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.02)

    watcher = threading.Thread(target=interrupt_after_first_cell)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            driftlab.run(spec, out=part, cache_dir=tmp_path / "cache", progress=False)
    finally:
        done.set()
        watcher.join()
    finished = [s for s in driftlab.open(part).status if s["status"] == "ok"]
    assert 1 <= len(finished) < 4, "the interrupt came after the first cell and before the last"
    resumed = driftlab.run(spec, out=part, cache_dir=tmp_path / "cache", resume=True, progress=False)
    a, b = _frames_without_timings(whole), _frames_without_timings(resumed)
    for name in a:
        assert a[name].equals(b[name]), name


def test_open_reads_a_committed_folder():
    run = driftlab.open("results/gspo_fig1")
    assert run.endpoints and "verdict" in run.endpoints[0]
    assert run.summary
    assert run.frames["steps"].select(pl.len()).collect().item() > 0
    with pytest.raises(FileNotFoundError):
        driftlab.open("results/no_such_folder")


def test_the_readme_example_runs_as_written(tmp_path, capsys):
    """The README's Python block, executed as it stands (its output folder moved under tmp)."""
    readme = (ROOT / "README.md").read_text()
    after = readme.split("### From Python", 1)[1]
    block = after.split("```python\n", 1)[1].split("```", 1)[0]
    assert 'out="/tmp/quick"' in block, "the test moves the README's output folder"
    exec(compile(block.replace('"/tmp/quick"', repr(str(tmp_path / "quick"))), "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "reward_mean" in printed and "arm" in printed
