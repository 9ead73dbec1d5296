"""driftlab from Python: run a spec, get its frames as Polars.

The Rust library is the one implementation; this package converts. A spec is a name in the
specs folder (``"moe_drift"``), a path to a ``.toml`` file, a TOML string, or a dict with the
keys of a spec file; it is checked by the same code as the ``driftlab`` command, and a bad one
raises :class:`SpecError` naming the key, the arm or the regime.

    import driftlab
    run = driftlab.run("moe_drift", quick=True, regimes=["natural"], out="/tmp/quick")
    steps = run.frames["steps"].collect()        # a polars DataFrame
    print(run.endpoints[0]["verdict"])

docs/python.md has the whole API.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _driftlab
from ._driftlab import SpecError

__all__ = [
    "SpecError",
    "Run",
    "experiments",
    "spec",
    "validate",
    "run",
    "open",
    "report",
    "schema",
    "FRAMES",
]

#: The frames a run writes, each ``<name>.parquet`` in its folder (docs/metrics.md).
FRAMES = ("steps", "updates", "layers", "lengths", "prefixes", "events")

SpecLike = Union[str, os.PathLike, Mapping[str, Any]]


def experiments(specs: Union[str, os.PathLike] = "experiments") -> Dict[str, str]:
    """The specs in ``specs``: name -> description (or, for one that does not parse, why)."""
    return {name: text for name, text, _ok in _driftlab.experiments(str(specs))}


def _source(spec: SpecLike, keep: List[tempfile.TemporaryDirectory]) -> str:
    """A spec as the library takes it: a name, or the path of a ``.toml`` file."""
    if isinstance(spec, Mapping):
        text = _driftlab.toml_from_json(json.dumps(dict(spec)))
    elif isinstance(spec, os.PathLike):
        return os.fspath(spec)
    elif isinstance(spec, str) and "=" in spec:
        text = spec  # TOML text: a name or a path never holds "="
    else:
        return spec
    d = tempfile.TemporaryDirectory(prefix="driftlab-spec-")
    keep.append(d)
    path = Path(d.name) / "spec.toml"
    path.write_text(text)
    return str(path)


def _resolve(spec: SpecLike, specs, **selections) -> Tuple[dict, list]:
    keep: List[tempfile.TemporaryDirectory] = []
    try:
        s, cells = _driftlab.resolve(_source(spec, keep), str(specs), **selections)
    finally:
        for d in keep:
            d.cleanup()
    return json.loads(s), json.loads(cells)


def spec(spec: SpecLike, specs: Union[str, os.PathLike] = "experiments") -> Dict[str, Any]:
    """The spec as a dict (every default filled in), after the library's checks."""
    return _resolve(spec, specs)[0]


def validate(
    spec: SpecLike,
    specs: Union[str, os.PathLike] = "experiments",
    *,
    quick: bool = False,
    seeds: Optional[Sequence[int]] = None,
    steps: Optional[int] = None,
    regimes: Optional[Sequence[str]] = None,
    arms: Optional[Sequence[str]] = None,
) -> List[Dict[str, Any]]:
    """The resolved cells of ``spec`` with these selections (each cell's regime, arm, seed,
    model, task and RL settings), or :class:`SpecError` naming what is wrong."""
    return _resolve(
        spec,
        specs,
        quick=quick,
        seeds=list(seeds) if seeds is not None else None,
        steps=steps,
        regimes=list(regimes) if regimes is not None else None,
        arms=list(arms) if arms is not None else None,
    )[1]


class Run:
    """A results folder: its frames, summary, endpoints (verdicts), report and figures."""

    def __init__(self, dir: Union[str, os.PathLike]):
        self.dir = Path(dir)
        if not (self.dir / "config.json").is_file() and not (self.dir / "steps.parquet").is_file():
            raise FileNotFoundError(f"{self.dir} holds no driftlab run (no config.json, no steps.parquet)")

    def __repr__(self) -> str:
        return f"driftlab.Run({str(self.dir)!r})"

    @property
    def frames(self) -> Dict[str, "polars.LazyFrame"]:  # noqa: F821
        """Frame name -> ``polars.LazyFrame`` over its Parquet file (the frames the folder has)."""
        import polars as pl

        return {
            name: pl.scan_parquet(self.dir / f"{name}.parquet")
            for name in FRAMES
            if (self.dir / f"{name}.parquet").is_file()
        }

    @property
    def config(self) -> Dict[str, Any]:
        """``config.json``: the spec, every cell's resolved settings, the build."""
        return json.loads((self.dir / "config.json").read_text())

    @property
    def status(self) -> List[Dict[str, Any]]:
        """``status.json``: one entry per finished cell."""
        p = self.dir / "status.json"
        return json.loads(p.read_text()) if p.is_file() else []

    @property
    def summary(self) -> Dict[str, Any]:
        """``summary.json``: per arm, the means and 95% intervals of its metrics."""
        return json.loads((self.dir / "summary.json").read_text())

    @property
    def endpoints(self) -> List[Dict[str, Any]]:
        """``endpoints.json``: every declared endpoint, its estimate, p-values and verdict."""
        p = self.dir / "endpoints.json"
        return json.loads(p.read_text()) if p.is_file() else []

    @property
    def report_md(self) -> str:
        """``report.md``, the report's text."""
        return (self.dir / "report.md").read_text()

    @property
    def figures(self) -> List[Path]:
        """The report's figures (SVG), in folder order."""
        return sorted((self.dir / "plots").rglob("*.svg"))


def run(
    spec: SpecLike,
    *,
    quick: bool = False,
    seeds: Optional[Sequence[int]] = None,
    steps: Optional[int] = None,
    regimes: Optional[Sequence[str]] = None,
    arms: Optional[Sequence[str]] = None,
    out: Optional[Union[str, os.PathLike]] = None,
    jobs: int = 1,
    threads: Optional[int] = None,
    resume: bool = False,
    progress: bool = True,
    specs: Union[str, os.PathLike] = "experiments",
    cache_dir: Union[str, os.PathLike] = "results/.cache",
) -> Run:
    """Run every cell of ``spec`` (with these selections), then its report, as
    ``driftlab experiment`` does, and return the folder as a :class:`Run`.

    ``out`` defaults to ``results/<name>`` for the whole spec and ``results/<name>-quick`` or
    ``-custom`` for a selection. The GIL is released while it runs. Ctrl-C (a notebook's
    interrupt) stops after the current step with every finished cell written and raises
    ``KeyboardInterrupt``; ``resume=True`` then runs only the cells that are missing.
    ``progress=False`` prints nothing; otherwise a line per stage, at most one per few
    seconds."""
    keep: List[tempfile.TemporaryDirectory] = []
    try:
        d = _driftlab.run(
            _source(spec, keep),
            specs=str(specs),
            quick=quick,
            seeds=list(seeds) if seeds is not None else None,
            steps=steps,
            regimes=list(regimes) if regimes is not None else None,
            arms=list(arms) if arms is not None else None,
            out=os.fspath(out) if out is not None else None,
            jobs=jobs,
            threads=threads,
            resume=resume,
            progress=progress,
            cache_dir=os.fspath(cache_dir),
        )
    finally:
        for t in keep:
            t.cleanup()
    return Run(d)


def open(dir: Union[str, os.PathLike]) -> Run:  # noqa: A001 (the documented name)
    """An existing results folder (a committed one, or one a run wrote)."""
    return Run(dir)


def report(dir: Union[str, os.PathLike]) -> Run:
    """Rebuild the summary, plots and ``report.md`` of a results folder from its frames."""
    _driftlab.report(os.fspath(dir))
    return Run(dir)


def schema() -> Dict[str, Any]:
    """Every frame's columns, dtypes and definitions, as ``driftlab schema`` prints them."""
    return json.loads(_driftlab.schema())
