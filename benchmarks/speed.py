"""Median time of one estimate and of a 200-point sweep (targets on the 2-core dev machine: < 1 ms, < 100 ms).

Run: ``python benchmarks/speed.py``. The model spec is loaded once (as the dashboard caches it). "Warm" is a
slider move (what depends on the deployment alone is computed once: ``calculator.engine.estimate._Deployment``);
"cold" clears every memo first and computes it all: settings, weights, overheads, budget, KV layout, capacity and the
largest fitting max_model_len. Times are CPU time (``time.process_time``), since the dev machines are shared; the
load average is printed with them.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

# NOTE: this checkout's calculator, not the one the environment installed (editable, maybe another worktree's), so
# that old and new code can be timed side by side from two worktrees sharing one environment.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from calculator import Scenario, estimate, load_model_spec  # noqa: E402
from calculator.engine.estimate import clear_caches  # noqa: E402

ROUNDS = 200
SWEEP_POINTS = 200
CASES = {
    "Llama-3.1-8B on H100": Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb"),
    "gemma-3-27b (hybrid) TP2": Scenario(model="google/gemma-3-27b-it", gpu="a100-sxm-80gb", tensor_parallel_size=2),
    "DeepSeek-V3 (MLA, MoE) TP8": Scenario(model="deepseek-ai/DeepSeek-V3", gpu="h200", tensor_parallel_size=8),
}


def median_seconds(function, rounds: int) -> float:
    timings = []
    for _ in range(rounds):
        start = time.process_time()
        function()
        timings.append(time.process_time() - start)
    return statistics.median(timings)


def main() -> None:
    for name, scenario in CASES.items():
        spec = load_model_spec(scenario.model)
        one = median_seconds(lambda: estimate(scenario, spec), ROUNDS)
        cold = median_seconds(lambda: (clear_caches(), estimate(scenario, spec)), ROUNDS)
        lengths = [1024 + i * 512 for i in range(SWEEP_POINTS)]
        sweep = median_seconds(lambda: [estimate(scenario.replace(max_model_len=n), spec) for n in lengths], 10)
        print(f"{name:28} one estimate: {one * 1e3:6.3f} ms warm, {cold * 1e3:6.3f} ms cold (medians of {ROUNDS})  "
              f"{SWEEP_POINTS}-point sweep: {sweep * 1e3:7.1f} ms (median of 10)")
    print("CPU time; load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
