"""The one capacity plan: the deployment as set, planned for memory and speed together, beside every other
tensor x pipeline layout with why it loses (issue 24)."""

from __future__ import annotations

from calculator import Scenario, Workload, estimate, load_model_spec
from calculator.speed.ceilings import plan_both_ceilings
from calculator.speed.inputs import SpeedInputs
from calculator.speed.layouts import layout_plan

LLAMA_70B = Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="h100-sxm-80gb", tensor_parallel_size=2,
                     max_model_len=32768, kv_cache_dtype="fp8")
WORKLOAD = Workload(prompt_tokens_mean=2000, output_tokens_mean=500, target_concurrent_requests=200)


def test_every_layout_is_planned_for_both_ceilings_and_says_why_it_loses() -> None:
    spec = load_model_spec(LLAMA_70B.model)
    result, inputs = estimate(LLAMA_70B, spec), SpeedInputs()
    traffic, prices = inputs.traffic(WORKLOAD), inputs.prices(result.gpu)
    plan = layout_plan(result, WORKLOAD, traffic, inputs.slo, prices=prices)
    assert plan.chosen == plan_both_ceilings(result, WORKLOAD, traffic, inputs.slo, prices=prices)
    mine = plan.chosen.plan
    # 80 layers and 64 heads: TP 1, 2, 4, 8 x PP 1, 2, 4, less the layout as set
    assert len(plan.alternatives) == 11
    for option in plan.alternatives:
        other = estimate(LLAMA_70B.replace(tensor_parallel_size=option.tensor_parallel_size,
                                           pipeline_parallel_size=option.pipeline_parallel_size), spec)
        if option.ceilings is None:
            assert not other.fits and option.reason.startswith("does not start: ")
            continue
        theirs = option.ceilings.plan
        assert option.ceilings == plan_both_ceilings(other, WORKLOAD, traffic, inputs.slo, prices=prices)
        if not theirs.meets_slo:
            assert option.reason == "misses the SLOs: " + "; ".join(theirs.violations) and not option.better
        elif theirs.gpus > mine.gpus:
            assert option.reason.startswith(f"needs {theirs.gpus:,} GPUs, {theirs.gpus - mine.gpus:,} more")
        elif theirs.gpus < mine.gpus:
            assert option.reason == f"fewer GPUs: {theirs.gpus:,} instead of {mine.gpus:,}" and option.better
    # 70B in bf16 (65.7 GiB of weights per GPU at TP 2) cannot start on one 80 GB H100 at TP 1
    tp1 = next(o for o in plan.alternatives if (o.tensor_parallel_size, o.pipeline_parallel_size) == (1, 1))
    assert tp1.ceilings is None
    # the better layouts are listed first
    flags = [o.better for o in plan.alternatives]
    assert flags == sorted(flags, reverse=True)
