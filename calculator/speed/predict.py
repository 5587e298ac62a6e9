"""One speed estimate: a deployment (an ``Estimate``) and its traffic in; latency, throughput and cost out."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

from ..engine.estimate import Estimate
from ..engine.workload import Workload, prefix_caching_enabled, workload_capacity
from ..errors import InvalidInput
from .bench import BenchFigures, BenchLoad, EngineLimits, StepBatch, StepCost, simulate
from .calibration import BAND_FACTOR, SpeedConstants, constants_for
from .costs import ForwardCosts, forward_costs
from .front_end import Endpoint, FrontEndWork, front_end_work
from .hardware import UNMEASURED_CEILING_RATIO, UNMEASURED_STREAMING_RATIO, ComputePath, GpuRates, gpu_rates
from .mla_kernels import excess_at
from .prices import GpuPrice, gpu_price
from .queueing import QueueWait, closed_loop_wait, open_loop_wait, p95_with_step_in_flight
from .scheduler import ServedConcurrency, SteadyState, prefill_time_s, served_concurrency, steady_state
from .step_time import StepTime, step_time
from .traffic import Traffic

_RATE_FIXED_POINT_ROUNDS = 30
_TURN_SEARCH_LIMIT = 1 << 20
MS = 1e3


class Band(BaseModel):
    """The measured spread of a prediction: the model's residuals on real runs, as low and high values."""

    model_config = ConfigDict(frozen=True)
    low: float
    high: float


class SpeedEstimate(BaseModel):
    """Latency, throughput and cost of one replica (TP x PP GPUs) under ``traffic``. Times in ms."""

    model_config = ConfigDict(frozen=True)
    traffic: Traffic
    gpu_name: str
    num_gpus: int
    compute_path: ComputePath
    compute_ceiling_tflops: float  # the achievable matmul rate of the path per GPU (calculator/speed/hardware.py)
    compute_ceiling_measured: bool  # False: nobody measured this card, the datasheet x UNMEASURED_CEILING_RATIO
    speedup_over_bf16: float | None = None  # the FP8 or FP4 ceiling is the measured BF16 one times this (hardware.py)
    speedup_timed_on: str | None = None  # the card of the same chip that speedup was timed on, when not this one
    streaming_bandwidth_gb_s: float  # the rate a step's bytes stream at per GPU (hardware.py), before the efficiency
    streaming_bandwidth_measured: bool  # False: nobody timed this card, the datasheet x UNMEASURED_STREAMING_RATIO
    # the routed experts' FLOPs run at this share of the ceiling (expert_kernels.py); None for a dense model
    expert_gemm_share: float | None = None
    # an MLA block's decode latency beyond its bytes at the running requests, as timed on the card's family
    # (mla_kernels.py); None without MLA or where nobody timed it
    mla_block_us: float | None = None
    # DeepSeek sparse attention: (query heads a GPU, the heads FlashMLA's sparse kernels compute for them)
    sparse_mla_heads: tuple[int, int] | None = None
    concurrency: ServedConcurrency
    running_requests: float  # mean requests in the engine (under a rate: rate x service time)
    ttft_ms: float
    ttft_p95_ms: float
    tpot_ms: float  # = mean inter-token latency
    e2e_ms: float
    queue_wait_ms: float
    queue_wait_p95_ms: float
    utilisation: float
    saturated: bool  # arrivals outrun the engine: the queue (and TTFT) grows without bound
    request_throughput: float  # requests/s
    output_throughput_tok_s: float
    total_throughput_tok_s: float
    prefill_steps: int
    decode_step: StepTime  # the steady decode step on the busiest rank (one pipeline stage)
    decode_bound: Literal["memory", "compute"]
    compute_bound_from_batch: int | None  # decode batch where compute time overtakes memory time
    gpu_price: GpuPrice | None
    front_end: FrontEndWork  # the API server's per-request work on its event loop, in the TTFT
    ttft_band_ms: Band
    tpot_band_ms: Band
    output_throughput_band_tok_s: Band

    @computed_field  # type: ignore[prop-decorator]
    @property
    def itl_ms(self) -> float:
        return self.tpot_ms

    @computed_field  # type: ignore[prop-decorator]
    @property
    def per_user_tok_s(self) -> float:
        return MS / self.tpot_ms if self.tpot_ms > 0 else math.inf

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gpu_hour_cost(self) -> float | None:
        """Dollars per hour for this replica's GPUs."""
        return self.gpu_price.usd_per_gpu_hour * self.num_gpus if self.gpu_price else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_per_million_output_tokens(self) -> float | None:
        if self.gpu_hour_cost is None or self.output_throughput_tok_s <= 0:
            return None
        return self.gpu_hour_cost / (self.output_throughput_tok_s * 3600) * 1e6

    @property
    def ttft_p95_band_ms(self) -> Band:
        """TTFT p95 within the same measured spread as the mean TTFT."""
        return _band(self.ttft_p95_ms, BAND_FACTOR["ttft"])



class _Replica:
    """The pieces every sub-estimate of one deployment shares (costs, rates, constants, budget)."""

    def __init__(self, result: Estimate, constants: SpeedConstants | None) -> None:
        if not result.on_gpu:
            raise InvalidInput("the speed model covers GPUs; this deployment runs on the CPU")
        if not result.fits:
            raise InvalidInput(f"the deployment does not start, so it serves nothing: {result.error}")
        s = result.settings
        self.result = result
        self.rates: GpuRates = gpu_rates(result.gpu, result.quantization)
        self.constants = constants or constants_for(result.gpu.platform)
        self.costs: ForwardCosts = forward_costs(result)
        self.pp = s.pipeline_parallel_size
        self.budget = s.max_num_batched_tokens

    def state(self, running: float, traffic: Traffic) -> SteadyState:
        # NOTE: with PP, vLLM keeps pp micro-batches in flight; each stage steps through running / pp requests.
        return steady_state(self.costs, self.rates, self.constants, running=max(running / self.pp, 1.0),
                            prompt_tokens=traffic.input_tokens, output_tokens=traffic.output_tokens,
                            budget_tokens=self.budget)

    def token_latency_s(self, stage_s: float) -> float:
        """A token crosses every stage: pp stage times plus a hop between stages."""
        return self.pp * stage_s + (self.pp - 1) * self.constants.all_reduce_latency_s

    def first_token_s(self, state: SteadyState, prompt_tokens: int, *, in_flight_share: float = 0.5) -> float:
        """Service time to the first token (no queue): the share of the step in flight to line up (half, on
        average), the chunks, the request overhead."""
        prefill = prefill_time_s(self.costs, self.rates, self.constants, prompt_tokens=prompt_tokens, state=state,
                                 budget_tokens=self.budget)
        return (in_flight_share * self.step_in_flight_s(state) + self.token_latency_s(prefill)
                + self.constants.request_overhead_s)

    def step_in_flight_s(self, state: SteadyState) -> float:
        """The step a new request may find running (none when it is the only request)."""
        return state.step.total_s if state.running * self.pp > 1 else 0.0

    def front_end_s(self, endpoint: Endpoint) -> float:
        """The API server's per-request work on its event loop before the engine (``front_end.py``)."""
        return front_end_work(self.result.rules, self.result.model, endpoint).seconds

    def service_s(self, running: float, traffic: Traffic) -> tuple[SteadyState, float, float, float]:
        state = self.state(running, traffic)
        tpot = self.token_latency_s(state.step.total_s) / self.costs.tokens_per_decode_step
        ttft = self.first_token_s(state, traffic.input_tokens) + self.front_end_s(traffic.endpoint)
        return state, ttft, tpot, ttft + (traffic.output_tokens - 1) * tpot


def speed_estimate(result: Estimate, traffic: Traffic, *, constants: SpeedConstants | None = None,
                   prices: Mapping[str, GpuPrice] | None = None) -> SpeedEstimate:
    """How fast ``result``'s deployment serves ``traffic``, per replica. ``InvalidInput`` if it cannot start."""
    replica = _Replica(result, constants)
    longest = traffic.prompt_p95 + traffic.output_p95
    if longest > result.settings.max_model_len:
        raise InvalidInput(f"requests of {longest:,} tokens (p95 prompt + output) exceed max_model_len "
                           f"{result.settings.max_model_len:,}: vLLM rejects them; raise --max-model-len")
    kv_limit = workload_capacity(result, Workload(
        prompt_tokens_mean=traffic.input_tokens, output_tokens_mean=traffic.output_tokens)).concurrency_mean
    limits = served_concurrency(traffic.concurrency, result.settings.max_num_seqs, kv_limit)
    if limits.served < 1:
        raise InvalidInput(f"not one request of {traffic.input_tokens} + {traffic.output_tokens} tokens fits in "
                           "the KV cache")
    if traffic.concurrency is not None:
        running = float(limits.served)
        state, ttft_s, tpot_s, service_s = replica.service_s(running, traffic)
        wait = closed_loop_wait(traffic.concurrency, limits.served, service_s)
        throughput = traffic.concurrency / (service_s + wait.mean_s)
    else:
        running, (state, ttft_s, tpot_s, service_s), wait = _open_loop(replica, traffic, limits.served)
        throughput = traffic.request_rate if not wait.saturated else limits.served / service_s
    front_end = front_end_work(result.rules, result.model, traffic.endpoint)
    ttft_p95_s = (replica.first_token_s(state, traffic.prompt_p95, in_flight_share=0.0) + front_end.seconds
                  + p95_with_step_in_flight(wait, replica.step_in_flight_s(state)))
    ttft_ms = (ttft_s + wait.mean_s) * MS
    step = state.decode_only_step
    turn = _compute_bound_from(replica, state.decode_context_tokens)
    price = gpu_price(result.gpu, prices)
    tpot_ms = tpot_s * MS
    output = throughput * traffic.output_tokens
    return SpeedEstimate(
        traffic=traffic, gpu_name=result.gpu.name if result.gpu else "", num_gpus=result.num_gpus,
        compute_path=replica.rates.compute_path, compute_ceiling_tflops=replica.rates.achievable_flops / 1e12,
        compute_ceiling_measured=replica.rates.ceiling_measured,
        speedup_over_bf16=replica.rates.speedup_over_bf16, speedup_timed_on=replica.rates.speedup_timed_on,
        streaming_bandwidth_gb_s=replica.rates.streaming_bandwidth_bytes_s / 1e9,
        streaming_bandwidth_measured=replica.rates.bandwidth_measured,
        expert_gemm_share=replica.costs.expert_gemm_share if replica.costs.expert_flops_per_token else None,
        mla_block_us=(excess_at(replica.costs.mla_decode_excess, running) * 1e6
                      if replica.costs.mla_decode_excess is not None else None),
        sparse_mla_heads=next(((group.sparse_mla_heads, group.sparse_mla_padded_heads or group.sparse_mla_heads)
                               for group in replica.costs.attention if group.sparse_mla_heads), None),
        concurrency=limits, running_requests=running,
        ttft_ms=ttft_ms, ttft_p95_ms=ttft_p95_s * MS, tpot_ms=tpot_ms,
        e2e_ms=ttft_ms + (traffic.output_tokens - 1) * tpot_ms, queue_wait_ms=wait.mean_s * MS,
        queue_wait_p95_ms=wait.p95_s * MS, utilisation=wait.utilisation, saturated=wait.saturated,
        request_throughput=throughput, output_throughput_tok_s=output,
        total_throughput_tok_s=throughput * (traffic.input_tokens + traffic.output_tokens),
        prefill_steps=state.prefill_steps, decode_step=state.step, decode_bound=step.bound,
        compute_bound_from_batch=turn, gpu_price=price,
        front_end=front_end,
        ttft_band_ms=_band(ttft_ms, BAND_FACTOR["ttft"]), tpot_band_ms=_band(tpot_ms, BAND_FACTOR["tpot"]),
        output_throughput_band_tok_s=_band(output, BAND_FACTOR["throughput"]))


def ceiling_note(speed: SpeedEstimate) -> str:
    """The matmul ceiling and the streaming rate the prediction divides by, whether each was measured on the card,
    and the routed experts' share of the ceiling."""
    return (_ceiling_source(speed) + (f"; routed experts at {speed.expert_gemm_share:.2f} of it, the rate vLLM's "
                                      "fused-MoE kernels were timed at" if speed.expert_gemm_share is not None else "")
            + "; " + _streaming_source(speed) + _attention_source(speed))


def _attention_source(speed: SpeedEstimate) -> str:
    """What DeepSeek-style attention adds, where the deployment has it."""
    note = ""
    if speed.mla_block_us is not None:
        running = f"{speed.running_requests:,.0f}"
        note += (f"; MLA attention {speed.mla_block_us:,.0f} us a layer beyond its bytes at {running} running "
                 f"request{'' if running == '1' else 's'}, as vLLM's module was timed on a card of this family")
    if speed.sparse_mla_heads is not None:
        heads, padded = speed.sparse_mla_heads
        note += "; sparse attention over the indexer's top-k tokens" + (
            f" at {padded} query heads a GPU, FlashMLA's sparse kernels padding its {heads}" if padded != heads else "")
    return note


def _streaming_source(speed: SpeedEstimate) -> str:
    streaming = f"weights streamed at {speed.streaming_bandwidth_gb_s:,.0f} GB/s"
    if speed.streaming_bandwidth_measured:
        return f"{streaming}, the rate vLLM's decode GEMMs were timed at on the card"
    peak = speed.streaming_bandwidth_gb_s / UNMEASURED_STREAMING_RATIO
    return (f"{streaming}: {UNMEASURED_STREAMING_RATIO:.2f} x the {peak:,.0f} GB/s peak, the median share "
            "timed on other cards")


def _ceiling_source(speed: SpeedEstimate) -> str:
    ceiling = f"matmul ceiling {speed.compute_ceiling_tflops:,.1f} TFLOPS"
    if speed.speedup_over_bf16 is not None:
        where = f" on the {speed.speedup_timed_on}, a card of the same chip" if speed.speedup_timed_on else ""
        return (f"{ceiling}: the BF16 one measured on the card x {speed.speedup_over_bf16:.2f}, the speedup vLLM's "
                f"{speed.compute_path.upper()} GEMMs were timed at over its BF16 ones{where}")
    if speed.compute_ceiling_measured:
        return f"{ceiling}, measured on the card"
    # NOTE: the peak is the catalog's datasheet figure or the one the user gave (a custom GPU, --gpu-bf16-tflops):
    # named by its value, so the note holds for both.
    peak = speed.compute_ceiling_tflops / UNMEASURED_CEILING_RATIO
    return (f"{ceiling}: {UNMEASURED_CEILING_RATIO:.2f} x the {peak:,.1f} TFLOPS peak, the median share measured on "
            "other cards; no measurement of this one is on record")


def _band(value: float, factor: float) -> Band:
    return Band(low=value / factor, high=value * factor)


def _open_loop(replica: _Replica, traffic: Traffic, limit: int) -> tuple[float, tuple, QueueWait]:
    """Requests in the engine under a Poisson rate: running = rate x service time(running), at most ``limit``."""
    rate = traffic.request_rate or 0.0
    running = 1.0
    service = replica.service_s(running, traffic)
    for _ in range(_RATE_FIXED_POINT_ROUNDS):
        wanted = min(float(limit), max(1.0, rate * service[3]))
        if abs(wanted - running) < 1e-3 * running:
            break
        running = wanted
        service = replica.service_s(running, traffic)
    return running, service, open_loop_wait(rate, limit, service[3])


def _compute_bound_from(replica: _Replica, context_tokens: float) -> int | None:
    """The smallest decode batch whose compute time passes its memory time (None beyond 2^20)."""
    def compute_bound(batch: int) -> bool:
        memory_s, compute_s = step_time(replica.costs, replica.rates, replica.constants, decode_tokens=batch,
                                        decode_context_tokens=context_tokens, with_overheads=False)
        return compute_s > memory_s

    # NOTE: per request, a decode step adds KV bytes and FLOPs in a fixed ratio; when the KV bytes already take
    # longer than the FLOPs, no batch turns compute-bound (long contexts), so skip the search.
    one_more = step_time(replica.costs, replica.rates, replica.constants, decode_tokens=2,
                         decode_context_tokens=context_tokens, with_overheads=False)
    one = step_time(replica.costs, replica.rates, replica.constants, decode_tokens=1,
                    decode_context_tokens=context_tokens, with_overheads=False)
    if one_more[1] - one[1] <= (one_more[0] - one[0]) and not replica.costs.num_experts:
        return None

    high = 1
    while not compute_bound(high):
        high *= 2
        if high > _TURN_SEARCH_LIMIT:
            return None
    low = high // 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if compute_bound(middle) else (middle, high)
    return high


def bench_prediction(result: Estimate, load: BenchLoad, *, constants: SpeedConstants | None = None,
                     measured: tuple[StepCost, float] | None = None) -> BenchFigures:
    """What ``vllm bench serve`` prints for ``load`` against ``result``'s deployment: vLLM's scheduler simulated step
    by step (``bench.py``) with ``result``'s limits, each step timed by the roofline, or by ``measured`` (a step cost
    and the per-request time before the engine, measured on a server). ``InvalidInput`` where it does not apply."""
    if not result.fits:
        raise InvalidInput(f"the deployment does not start, so it serves nothing: {result.error}")
    if measured is None:
        replica = _Replica(result, constants)
        cost, overhead_s = roofline_step_cost(replica), replica.constants.request_overhead_s
    else:
        cost, overhead_s = measured
    if result.settings.pipeline_parallel_size > 1:
        raise InvalidInput("the benchmark simulation runs one pipeline stage per step; pipeline parallel (PP > 1) "
                           "keeps several micro-batches in flight, which it does not model: use `speed`")
    longest = max(p + o for p, o in zip(load.input_tokens, load.output_tokens, strict=True))
    if longest > result.settings.max_model_len:
        raise InvalidInput(f"requests of up to {longest:,} tokens exceed max_model_len "
                           f"{result.settings.max_model_len:,}: vLLM rejects them; raise --max-model-len")
    if load.test_prompt and prefix_caching_enabled(result):
        load = load.model_copy(update={"first_prompt_cached": True})
    block = result.layout.block_size
    limits = EngineLimits(max_num_seqs=result.settings.max_num_seqs,
                          max_num_batched_tokens=result.settings.max_num_batched_tokens,
                          kv_cache_tokens=max(result.capacity.num_gpu_blocks - 1, 1) * block, block_size=block,
                          request_overhead_s=overhead_s,
                          front_end_s=front_end_work(result.rules, result.model, load.endpoint).seconds,
                          prefix_caching=prefix_caching_enabled(result))
    try:
        return simulate(load, limits, cost)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc


def roofline_step_cost(replica: _Replica):
    """A step's time from the roofline of ``step_time``: the decodes at their mean context and each prompt chunk
    after the tokens of its prompt already computed."""
    costs, rates, constants = replica.costs, replica.rates, replica.constants

    def cost(batch: StepBatch) -> float:
        chunks = batch.prefill_chunks
        prefill = sum(size for size, _ in chunks)
        start = sum(begun for _, begun in chunks) / len(chunks) if chunks else 0.0
        step = step_time(costs, rates, constants, decode_tokens=batch.decode_requests,
                         decode_context_tokens=batch.decode_context_tokens, prefill_tokens=prefill,
                         prefill_start_tokens=start, prefill_prompts=max(len(chunks), 1),
                         requests=batch.decode_requests + len(chunks)).total_s
        # NOTE: with speculative decoding a decode step yields tokens_per_decode_step tokens; one simulated step
        # stands for one token, so a decode-only step is counted at its share per token.
        return step if chunks else step / costs.tokens_per_decode_step

    return cost
