"""Where AIConfigurator's measured vLLM kernel tables are, for the scripts that reduce them
(``expert_gemm_shares.py``, ``decode_attention_rates.py``).

AIConfigurator (PyPI ``aiconfigurator``) is not a dependency of the planner: those scripts run in a separate
environment that has it (and pandas), or read a copy of its ``aiconfigurator_core/systems/data`` given by ``--data``.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def tables_from_command_line(argv: list[str] | None, description: str) -> tuple[Path, str]:
    """The tables' folder (``--data``, else the installed package's) and the AIConfigurator version they are from."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", type=Path,
                        help="aiconfigurator_core/systems/data (default: the installed package's)")
    args = parser.parse_args(argv)
    if args.data is not None:
        return args.data, "unknown (--data)"
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or spec.origin is None:
        parser.error("aiconfigurator is not installed here: give --data")
    try:
        return Path(spec.origin).parent / "systems" / "data", version("aiconfigurator")
    except PackageNotFoundError:
        return Path(spec.origin).parent / "systems" / "data", "unknown"


def write_reduction(out: Path, aiconfigurator: str, name: str, reduced: dict) -> dict:
    """Save one script's reduction as ``{"aiconfigurator": version, name: reduced}`` and return that table."""
    table = {"aiconfigurator": aiconfigurator, name: reduced}
    out.write_text(json.dumps(table, indent=1) + "\n")
    return table


def latest_table(data: Path, system: str, kind: str, name: str) -> Path | None:
    """The newest vLLM version's table of one kind (``moe``, ``gemm``, ``attention``) for one GPU system."""
    files = sorted(glob.glob(str(data / system / kind / "vllm" / "*" / name)))
    return Path(files[-1]) if files else None
