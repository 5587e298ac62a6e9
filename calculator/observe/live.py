"""Estimate vs reality for a running server (pure): its settings as a Scenario, predicted vs actual capacity,
live usage in tokens and bytes, a back-solved calibration, the workload it really sees, and advice."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, ValidationError, computed_field

from ..engine.estimate import Estimate
from ..engine.kv_cache import capacity_figures, in_flight_tokens
from ..engine.vllm_versions import LATEST_VERSION, VllmVersion
from ..engine.workload import Workload
from ..errors import CalculatorError, one_line_validation_error
from ..limits import field_bounds
from ..scenario import Scenario
from ..units import GIB
from .live_client import ServerModel
from .metrics import EngineMetrics, Histogram, Rates
from .reconcile import server_bytes_per_block

# "Near 100 %": with requests queued and the pool this full, the next prompt's blocks do not fit, so the
# KV cache (not the scheduler's max_num_seqs) is what holds them back.
NEARLY_FULL_USAGE = 0.8
RESTART_NOTE = "A counter went down: the server restarted between two reads; rates restart from here."


class UnusableReading(CalculatorError):
    """A server reports a setting or a workload that no estimate can take (outside the planner's bounds)."""


def scenario_from_server(engine: EngineMetrics, model: ServerModel | None, version: str | None,
                         base: Scenario) -> Scenario:
    """``base`` (model, GPU, device chosen by the user) with every setting the server reports about itself."""
    changes: dict[str, object] = {}
    try:
        changes["vllm_version"] = str(VllmVersion.parse(version)) if version else base.vllm_version
    except CalculatorError:
        changes["vllm_version"] = LATEST_VERSION
    if (block := engine.config_int("block_size")) is not None:
        changes["block_size"] = block
    dtype = (engine.cache_config or {}).get("cache_dtype")
    if dtype and dtype != "None":
        changes["kv_cache_dtype"] = dtype
    if (utilization := engine.config_float("gpu_memory_utilization")) is not None and 0 < utilization <= 1:
        changes["gpu_memory_utilization"] = utilization
    if (memory := engine.config_int("kv_cache_memory_bytes")) is not None:
        changes["kv_cache_memory_bytes"] = memory
    if (override := engine.config_int("num_gpu_blocks_override")) is not None:
        changes["num_gpu_blocks_override"] = override
    if model is not None and model.max_model_len:
        changes["max_model_len"] = model.max_model_len
    try:
        return base.replace(**changes)
    except ValidationError as exc:
        raise UnusableReading(f"the server reports {one_line_validation_error(exc)}: no estimate can take that "
                              "setting") from exc


class ComparisonRow(BaseModel):
    model_config = ConfigDict(frozen=True)
    quantity: str
    predicted: float
    actual: float | None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def error_percent(self) -> float | None:
        if self.actual is None or self.actual == 0:
            return None
        return 100 * (self.predicted - self.actual) / self.actual


def actual_capacity(engine: EngineMetrics, max_model_len: int | None) -> tuple[float | None, float | None]:
    """(tokens, concurrency) as the server reports them; derived from blocks on servers older than 0.24."""
    tokens, concurrency = engine.config_int("kv_cache_size_tokens"), engine.config_float("kv_cache_max_concurrency")
    blocks, block = engine.config_int("num_gpu_blocks"), engine.config_int("block_size")
    if tokens is None and blocks and block:
        tokens = blocks * block
    if concurrency is None and blocks and block and max_model_len:
        concurrency = blocks * block / max_model_len
    return (float(tokens) if tokens is not None else None), concurrency


def compare(result: Estimate, engine: EngineMetrics) -> list[ComparisonRow]:
    """Predicted vs actual blocks, token capacity and concurrency."""
    tokens, concurrency = actual_capacity(engine, result.settings.max_model_len)
    blocks = engine.config_int("num_gpu_blocks")
    return [
        ComparisonRow(quantity="num_gpu_blocks", predicted=result.capacity.num_gpu_blocks,
                      actual=float(blocks) if blocks is not None else None),
        ComparisonRow(quantity="KV cache tokens", predicted=result.capacity.kv_cache_tokens, actual=tokens),
        ComparisonRow(quantity="max concurrency", predicted=result.capacity.max_concurrency, actual=concurrency),
    ]


def with_actual_blocks(result: Estimate, num_gpu_blocks: int) -> Estimate:
    """The estimate with the server's real block count: what its token and concurrency figures must then be."""
    settings = result.settings
    in_flight = in_flight_tokens(result.rules, max_num_batched_tokens=settings.max_num_batched_tokens,
                                 pipeline_parallel_size=settings.pipeline_parallel_size,
                                 async_scheduling=settings.async_scheduling)
    capacity = capacity_figures(result.layout, result.rules, num_gpu_blocks=num_gpu_blocks,
                                max_model_len=settings.max_model_len, in_flight=in_flight)
    stages = tuple(budget.model_copy(update={"kv_cache_bytes": num_gpu_blocks * per_block})
                   for budget, per_block in zip(result.budgets_per_stage, result.layout.bytes_per_block_per_stage))
    busiest = result.budgets_per_stage.index(result.budget)
    return result.model_copy(update={"capacity": capacity, "budget": stages[busiest], "budgets_per_stage": stages})


def calibration_gib(result: Estimate, num_gpu_blocks: int) -> float:
    """Overhead the estimate missed (GiB per GPU): predicted KV pool minus the server's, whose true size lies
    within one block above ``blocks x bytes_per_block`` (so the middle of that block is the best guess)."""
    actual = (num_gpu_blocks + 0.5) * result.layout.bytes_per_block
    return round((result.budget.kv_cache_bytes - actual) / GIB, 3)


class LiveUsage(BaseModel):
    """KV usage in blocks, tokens and bytes, not just a percentage."""

    model_config = ConfigDict(frozen=True)
    usage_fraction: float
    used_blocks: float
    usable_blocks: int
    used_tokens: float
    capacity_tokens: int
    used_bytes: float
    pool_bytes: int


def live_usage(engine: EngineMetrics, result: Estimate) -> LiveUsage | None:
    """Usage of the real pool; tokens count block slots (a hybrid model's blocks hold one group's tokens)."""
    blocks, usage = engine.config_int("num_gpu_blocks"), engine.kv_cache_usage
    if not blocks or usage is None:
        return None
    block_size = engine.config_int("block_size") or result.layout.block_size
    groups = max(1, len(result.layout.groups))
    usable = blocks - 1
    used = usage * usable
    per_block: float = result.layout.bytes_per_block
    if (span := server_bytes_per_block(engine)) is not None and not span[0] < per_block <= span[1]:
        per_block = span[1]  # NOTE: the server's own figure, so bytes agree with its kv_cache_memory_bytes
    return LiveUsage(usage_fraction=usage, used_blocks=used, usable_blocks=usable,
                     used_tokens=used * block_size / groups, capacity_tokens=usable * block_size // groups,
                     used_bytes=used * per_block, pool_bytes=round(blocks * per_block))


def workload_from_server(engine: EngineMetrics, rates_now: Rates | None, target: int = 1) -> Workload | None:
    """The workload the server really sees: length histograms (mean, p95), prefix hits, parallel samples;
    ``UnusableReading`` when they describe lengths or samples beyond any Workload (a hostile or broken server)."""
    histograms = engine.histograms
    prompt, output = histograms.get("prompt_tokens"), histograms.get("generation_tokens")
    if prompt is None or output is None or not prompt.count or not output.count:
        return None
    samples = histograms.get("params_n")
    _check_lengths({"a mean prompt": (prompt.mean, "prompt_tokens_mean"),
                    "a p95 prompt": (_p95(prompt), "prompt_tokens_p95"),
                    "a mean output": (output.mean, "output_tokens_mean"),
                    "a p95 output": (_p95(output), "output_tokens_p95"),
                    "a mean n (parallel samples)": (samples.mean if samples else None, "parallel_samples")})
    prompt_mean = max(1, round(prompt.mean or 1))
    hit_rate = rates_now.prefix_cache_hit_rate if rates_now and rates_now.prefix_cache_hit_rate is not None else (
        (engine.prefix_cache_hits_total or 0) / engine.prefix_cache_queries_total
        if engine.prefix_cache_queries_total else 0.0)
    return Workload(
        prompt_tokens_mean=prompt_mean,
        output_tokens_mean=max(0, round(output.mean or 0)),
        prompt_tokens_p95=max(1, math.ceil(_p95(prompt) or prompt_mean)),
        output_tokens_p95=max(0, math.ceil(_p95(output) or 0)),
        shared_prefix_tokens=min(prompt_mean, round(hit_rate * prompt_mean)),
        parallel_samples=max(1, round(samples.mean)) if samples and samples.mean else 1,
        target_concurrent_requests=target)


def _p95(histogram: Histogram) -> float | None:
    """The p95 the histogram's sum allows: 16 outputs of exactly 200 tokens read 200, not the interpolated 195."""
    found = histogram.bounded_quantile(0.95)
    return None if found is None else found.value


def _check_lengths(figures: dict[str, tuple[float | None, str]]) -> None:
    """Each figure a histogram gives within the Workload field it becomes, else ``UnusableReading``."""
    for name, (value, field) in figures.items():
        _, high = field_bounds(Workload, field)
        if value is not None and not (math.isfinite(value) and value <= high):  # every one of them has a bound
            raise UnusableReading(f"the server's request histograms give {name} of {value:,.6g}, more than the "
                                  f"planner takes ({field} is at most {high:,}): its real workload is not used")


def pool_knobs(engine: EngineMetrics, on_cpu: bool = False) -> str:
    """How to give this server's KV cache more room, from how its pool was sized (``vllm:cache_config_info``)."""
    memory, override = engine.config_int("kv_cache_memory_bytes"), engine.config_int("num_gpu_blocks_override")
    if override is not None:
        return (f"its pool is fixed at {override:,} blocks by --num-gpu-blocks-override {override}: raise that "
                "override or remove it")
    if on_cpu:  # NOTE: gpu_memory_utilization does not size a CPU server's KV cache; this variable does
        now = f" (now {memory / GIB:,.0f} GiB)" if memory else ""
        return f"raise VLLM_CPU_KVCACHE_SPACE{now}, which sizes a CPU server's KV cache, or lower --max-model-len"
    if memory:
        return (f"raise --kv-cache-memory-bytes (now {memory / GIB:,.2f} GiB), use --kv-cache-dtype fp8, or lower "
                "--max-model-len")
    utilization = engine.config_float("gpu_memory_utilization")
    now = f" (now {utilization:g})" if utilization else ""
    return f"raise --gpu-memory-utilization{now}, use --kv-cache-dtype fp8, or lower --max-model-len"


def requests_the_pool_holds(engine: EngineMetrics) -> tuple[float, float] | None:
    """(how many of this server's requests its KV pool holds at their full length, their mean length in tokens),
    from the finished requests' prompt and output histograms; None before any request finished."""
    blocks, block_size = engine.config_int("num_gpu_blocks"), engine.config_int("block_size")
    prompt, output = engine.histograms.get("prompt_tokens"), engine.histograms.get("generation_tokens")
    if not blocks or blocks < 2 or not block_size or prompt is None or output is None:
        return None
    if prompt.mean is None or output.mean is None or prompt.mean + output.mean <= 0:
        return None
    length = prompt.mean + output.mean
    return (blocks - 1) * block_size / length, length  # NOTE: block 0 is vLLM's null block, never handed out


def queue_held_by_memory(engine: EngineMetrics, on_cpu: bool = False) -> str | None:
    """Why requests wait while the cache reads partly free, when the reason is memory: the pool cannot hold one
    more request beside those running once each grows to this server's mean length. vLLM admits a waiting request
    only while its blocks fit, and a preempted one comes back needing its whole context, so the queue waits on
    memory between preemptions even though the gauge is low. None when the pool holds more, when far more run than
    it holds at full length (then they are not the requests that grow to the mean), or when nothing finished."""
    holds = requests_the_pool_holds(engine)
    running = engine.running or 0.0
    if holds is None or not holds[0] - 1 < running <= math.ceil(holds[0]):
        return None
    tokens = ((engine.config_int("num_gpu_blocks") or 0) - 1) * (engine.config_int("block_size") or 0)
    return (f"requests here grow to {holds[1]:,.0f} tokens on average (prompt + output), so the {tokens:,}-token "
            f"pool holds {holds[0]:.1f} of them: a waiting request is admitted only while its blocks fit, and a "
            f"preempted one needs its whole context again. More KV memory helps: {pool_knobs(engine, on_cpu)}")


def advice(engine: EngineMetrics, rates_now: Rates | None, preempting_now: bool, on_cpu: bool = False) -> list[str]:
    """Warnings about saturation, each naming the knob that fits how this server's pool was sized;
    ``preempting_now``: the preemption counter grew over the latest interval (not over the session)."""
    notes: list[str] = []
    usage, waiting, running = engine.kv_cache_usage or 0.0, engine.waiting or 0.0, engine.running or 0.0
    if usage >= NEARLY_FULL_USAGE and waiting > 0:
        notes.append(f"The KV cache is {usage:.0%} full with {waiting:.0f} request(s) waiting: the cache is the "
                     f"bottleneck. More KV memory helps: {pool_knobs(engine, on_cpu)}; or add tensor parallelism / "
                     "replicas.")
    elif waiting > 0 and usage < 0.5 and (held := queue_held_by_memory(engine, on_cpu)):
        notes.append(f"{waiting:.0f} request(s) wait although the KV cache reads only {usage:.0%} now: memory is "
                     f"the bottleneck all the same, {held}.")
    elif waiting > 0 and usage < 0.5:
        notes.append(f"{waiting:.0f} request(s) wait although the KV cache is only {usage:.0%} full: the scheduler "
                     f"limit binds ({running:.0f} running). Raise --max-num-seqs or --max-num-batched-tokens.")
    rate = rates_now.preemptions_per_s if rates_now is not None else None
    if preempting_now or (rate or 0) > 0:
        per_s = f" ({rate:.2f}/s)" if rate else ""
        notes.append(f"Requests are being preempted now{per_s}: running requests lose their KV blocks and are "
                     f"recomputed. Lower --max-num-seqs, or give the KV cache more room: {pool_knobs(engine, on_cpu)}.")
    if rates_now is not None and rates_now.restarted:
        notes.append(RESTART_NOTE)
    return notes


def usage_history(points: list[tuple[float, EngineMetrics]], capacity_tokens: int) -> dict[str, list[float]]:
    """A session's scrapes as chart series: times, KV tokens in use, running and waiting requests."""
    return {"times": [t for t, _ in points],
            "used_tokens": [(e.kv_cache_usage or 0) * capacity_tokens for _, e in points],
            "running": [e.running or 0 for _, e in points], "waiting": [e.waiting or 0 for _, e in points]}


def preemptions_rising(points: Sequence[tuple[float, EngineMetrics]]) -> bool:
    """Whether the preemption counter grew between the last two reads: the rate now, not the session's total
    (40 s after a burst, preemptions it caused are history, not a trend)."""
    return len(points) > 1 and (points[-1][1].preemptions_total or 0) > (points[-2][1].preemptions_total or 0)
