"""The speed estimate and the recommendations as plain JSON objects (the CLI's ``--json`` contract)."""

from __future__ import annotations

import math

from .bands import SpeedBands
from .predict import Band, SpeedEstimate
from .recommend import Option, Recommendations


def _number(value: float | None, digits: int = 3) -> float | None:
    """Rounded; infinity (a saturated queue) becomes null, as JSON has no infinity."""
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


def _pair(band: Band) -> list[float | None]:
    return [_number(band.low), _number(band.high)]


def bands_summary(bands: SpeedBands) -> dict:
    """The measured spread by regime, and each way the deployment lies outside the measured runs (widened)."""
    return {"regime": bands.regime, "outside_measured_runs": list(bands.outside), "ttft_ms": _pair(bands.ttft_ms),
            "ttft_p95_ms": _pair(bands.ttft_p95_ms), "tpot_ms": _pair(bands.tpot_ms),
            "output_throughput_tok_s": _pair(bands.output_throughput_tok_s)}


def speed_summary(speed: SpeedEstimate, bands: SpeedBands | None = None) -> dict:
    """One replica's speed, cost and limits; times in ms, throughputs per second. ``bands``: the regime's measured
    spread (``calculator.speed.bands.speed_bands``), else the regime-free one."""
    return {
        "gpu": speed.gpu_name, "num_gpus": speed.num_gpus, "compute_path": speed.compute_path,
        "compute_ceiling_tflops": _number(speed.compute_ceiling_tflops, 1),
        "compute_ceiling_measured": speed.compute_ceiling_measured, "speedup_over_bf16": speed.speedup_over_bf16,
        "speedup_timed_on": speed.speedup_timed_on,
        "expert_gemm_share": speed.expert_gemm_share,
        "mla_block_us": _number(speed.mla_block_us, 1),
        "sparse_mla_heads": list(speed.sparse_mla_heads) if speed.sparse_mla_heads else None,
        "streaming_bandwidth_gb_s": _number(speed.streaming_bandwidth_gb_s, 0),
        "streaming_bandwidth_measured": speed.streaming_bandwidth_measured,
        "input_tokens": speed.traffic.input_tokens, "output_tokens": speed.traffic.output_tokens,
        "concurrency": speed.traffic.concurrency, "request_rate": speed.traffic.request_rate,
        "arrival": speed.traffic.arrival, "endpoint": speed.traffic.endpoint,
        "front_end_ms": _number(speed.front_end.seconds * 1e3), "front_end": speed.front_end.reason or None,
        "ttft_ms": _number(speed.ttft_ms), "ttft_p95_ms": _number(speed.ttft_p95_ms),
        "tpot_ms": _number(speed.tpot_ms), "itl_ms": _number(speed.itl_ms), "e2e_ms": _number(speed.e2e_ms),
        "queue_wait_ms": _number(speed.queue_wait_ms), "queue_wait_p95_ms": _number(speed.queue_wait_p95_ms),
        "per_user_tok_s": _number(speed.per_user_tok_s),
        "output_throughput_tok_s": _number(speed.output_throughput_tok_s),
        "total_throughput_tok_s": _number(speed.total_throughput_tok_s),
        "request_throughput": _number(speed.request_throughput, 4),
        "effective_concurrency": _number(speed.running_requests, 2),
        "concurrency_limit": speed.concurrency.binding,
        "max_num_seqs": speed.concurrency.max_num_seqs, "kv_cache_concurrency": speed.concurrency.kv_cache_limit,
        "utilisation": _number(speed.utilisation, 4), "saturated": speed.saturated,
        "decode_bound": speed.decode_bound, "compute_bound_from_batch": speed.compute_bound_from_batch,
        "prefill_steps": speed.prefill_steps,
        "gpu_hour_cost": _number(speed.gpu_hour_cost, 4),
        "cost_per_million_output_tokens": _number(speed.cost_per_million_output_tokens, 4),
        "price_source": speed.gpu_price.source if speed.gpu_price else None,
        "bands": bands_summary(bands) if bands is not None else {
            "ttft_ms": _pair(speed.ttft_band_ms), "tpot_ms": _pair(speed.tpot_band_ms),
            "output_throughput_tok_s": _pair(speed.output_throughput_band_tok_s)},
    }


def option_summary(option: Option) -> dict:
    d, plan = option.deployment, option.plan
    row = {"gpu": d.gpu, "gpu_name": d.gpu_name, "tensor_parallel_size": d.tensor_parallel_size,
           "pipeline_parallel_size": d.pipeline_parallel_size, "data_parallel_size": d.data_parallel_size,
           "enable_expert_parallel": d.enable_expert_parallel, "quantization": d.quantization,
           "kv_cache_dtype": d.kv_cache_dtype, "reason": option.reason}
    if plan is not None:
        row.update(replicas=plan.replicas, gpus=plan.gpus, cost_per_hour=_number(plan.cost_per_hour, 2),
                   cost_per_month=_number(plan.cost_per_month, 0),
                   cost_per_million_output_tokens=_number(plan.cost_per_million_output_tokens, 4),
                   ttft_p95_ms=_number(plan.per_replica.ttft_p95_ms), tpot_ms=_number(plan.per_replica.tpot_ms),
                   per_user_tok_s=_number(plan.per_replica.per_user_tok_s),
                   output_throughput_tok_s=_number(plan.output_throughput_tok_s),
                   slo_status=option.slo_status, slo_risks=list(option.risks))
    if option.bands is not None:
        row["bands"] = bands_summary(option.bands)
    if option.bench is not None:
        b = option.bench
        row["bench"] = {"ttft_p95_ms": _number(b.ttft_p95_ms), "ttft_p99_ms": _number(b.ttft_p99_ms),
                        "regime": b.regime, "ttft_p95_band_ms": [_number(b.band.low), _number(b.band.high)],
                        "simulated_prompts": b.simulated_prompts, "arrival": b.arrival}
    return row


def recommendations_summary(result: Recommendations) -> dict:
    return {"max_model_len": result.max_model_len, "price_set": result.price_set, "ttft_load": result.ttft_load,
            "by_cost_per_hour": [option_summary(o) for o in result.by_cost_per_hour],
            "by_cost_per_million_tokens": [option_summary(o) for o in result.by_cost_per_million_tokens],
            "by_ttft_p95": [option_summary(o) for o in result.by_ttft_p95],
            "rejected": [option_summary(o) for o in result.rejected]}
