"""The compiled binding (src/lib.rs); use the functions of the `driftlab` package instead."""

from typing import List, Optional, Tuple

class SpecError(ValueError): ...

def experiments(specs: str = "experiments") -> List[Tuple[str, str, bool]]: ...
def resolve(
    name: str,
    specs: str = "experiments",
    quick: bool = False,
    seeds: Optional[List[int]] = None,
    steps: Optional[int] = None,
    regimes: Optional[List[str]] = None,
    arms: Optional[List[str]] = None,
) -> Tuple[str, str]: ...
def toml_from_json(json: str) -> str: ...
def run(
    name: str,
    specs: str = "experiments",
    quick: bool = False,
    seeds: Optional[List[int]] = None,
    steps: Optional[int] = None,
    regimes: Optional[List[str]] = None,
    arms: Optional[List[str]] = None,
    out: Optional[str] = None,
    jobs: int = 1,
    threads: Optional[int] = None,
    resume: bool = False,
    progress: bool = True,
    cache_dir: str = "results/.cache",
) -> str: ...
def report(dir: str) -> None: ...
def schema() -> str: ...
