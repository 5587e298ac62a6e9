"""Median time of one speed estimate and of the whole-catalog recommender (targets on the 2-core dev machine:
< 1 ms and < 1 s).

Run: ``python benchmarks/speed_model_timing.py``. The model spec is loaded and the deployment estimated once (as the
dashboard caches them); "one speed estimate" is ``speed_estimate`` for a closed loop and for a request rate. The
recommender plans every catalog GPU x TP x weight quantization x KV dtype for a load and SLOs, estimates included.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from speed import median_seconds  # noqa: E402  (benchmarks/speed.py: this script's folder is on sys.path)

from calculator import (  # noqa: E402
    Scenario,
    Slo,
    Traffic,
    estimate,
    load_model_spec,
    recommend,
    speed_estimate,
)

ROUNDS = 200
CASES = {
    "Llama-3.1-8B on H100": Scenario(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm-80gb",
                                     max_model_len=8192),
    "Llama-3.1-70B TP4 on A100": Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="a100-sxm-80gb",
                                          tensor_parallel_size=4, max_model_len=8192),
    "DeepSeek-V3 TP8 on H200": Scenario(model="deepseek-ai/DeepSeek-V3", gpu="h200", tensor_parallel_size=8,
                                        max_model_len=16384),
}
LOADS = {"64 users": Traffic(input_tokens=1024, output_tokens=256, concurrency=64),
         "5 req/s": Traffic(input_tokens=1024, output_tokens=256, request_rate=5)}


def main() -> None:
    for name, scenario in CASES.items():
        result = estimate(scenario, load_model_spec(scenario.model))
        for load, traffic in LOADS.items():
            seconds = median_seconds(lambda: speed_estimate(result, traffic), ROUNDS)
            print(f"{name:28} {load:9} one speed estimate: {seconds * 1e3:6.3f} ms (median of {ROUNDS})")
    for model in ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"):
        spec = load_model_spec(model)
        load = Traffic(input_tokens=1024, output_tokens=256, concurrency=200)
        slo = Slo(ttft_p95_ms=2000, tpot_ms=50)
        seconds = median_seconds(lambda: recommend(spec, load, slo), 5)
        options = recommend(spec, load, slo)
        print(f"recommend {model}: whole catalog, {len(options.by_cost_per_hour) + len(options.rejected)} "
              f"deployments, {seconds:.3f} s (median of 5)")


if __name__ == "__main__":
    main()
