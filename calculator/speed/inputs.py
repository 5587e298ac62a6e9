"""What a person asks the speed model beside the deployment and the workload: how the load arrives, the SLOs,
their own GPU price, a custom GPU's rates and efficiencies measured on a running server (the Live page's
"calibrated" link). Frozen and validated once, so a share link and the pages agree on one meaning.

    inputs = SpeedInputs(request_rate=12, ttft_p95_ms=1500)
    traffic = inputs.traffic(Workload(prompt_tokens_mean=2000, output_tokens_mean=300))
    -> Traffic(input_tokens=2000, output_tokens=300, request_rate=12.0)
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..engine.estimate import Estimate
from ..engine.vllm_versions import LATEST_VERSION
from ..engine.workload import Workload
from ..errors import InvalidInput
from ..gpus import GpuSpec
from ..limits import MAX_CONTEXT_TOKENS, MAX_MODEL_REFERENCE_CHARS
from ..model.spec import ModelSpec
from ..scenario import DEFAULT_MODEL, Scenario, SpeculativeMethod
from .calibration import MAX_BANDWIDTH_EFFICIENCY, SpeedConstants, constants_for
from .ceilings import CeilingsPlan, plan_both_ceilings
from .layouts import LayoutPlan, layout_plan
from .plan import Slo
from .prices import GpuPrice, parse_price_overrides, price_set, price_table
from .bench import BenchLoad
from .bench_command import parse_bench_command
from .recommend import Option, Recommendations, recommend
from .sweep import ConcurrencySweep, concurrency_sweep
from .front_end import Endpoint
from .traffic import Traffic, traffic_from

# The planning example ("a time to first token under 2 s at p95", "ITL 62 ms > 50 ms"): SLOs a chat
# service commonly states, so the SLO line and the capacity plan mean something before anything is typed.
DEFAULT_TTFT_P95_MS = 2000.0
DEFAULT_TPOT_MS = 50.0
MAX_SLO_MS = 1e7  # 2.8 hours: any longer is not a latency objective
MAX_RATE = 1e6  # requests/s, tokens/s, GB/s and TFLOPS: far above any deployment or accelerator
# NOTE: every rate has a positive floor, not just "> 0": a rate of 5e-324 divides down to 0 (a rate shared by
# replicas) or multiplies up to inf and nan (a step time), so the smallest accepted value is still a real one.
MIN_REQUEST_RATE = 1e-6  # one request every 11.6 days
MIN_SLO_MS = 1e-3  # a microsecond: no latency objective is tighter
MIN_TOK_S_PER_USER = 1e-3
MIN_USD_PER_GPU_HOUR = 0.01  # a cent, what the dashboard shows
MAX_USD_PER_GPU_HOUR = 10_000
MIN_MEMORY_BANDWIDTH_GB_S = 1.0  # a custom GPU slower than this is a typo (a Raspberry Pi 4 streams 4 GB/s)
MIN_TFLOPS = 1e-3
MIN_EFFICIENCY = 1e-6  # what the Live page measures on a nearly idle server
CUSTOM_GPU_KEY = "custom"


class SpeedInputs(BaseModel):
    """The load (a Poisson rate, or the workload's concurrent requests when ``request_rate`` is None), SLOs
    (None: no limit), a price per GPU-hour (None: the price list's), a GPU's own rates (None: the catalog's; a
    custom GPU needs them), and measured efficiencies (None: the fitted ones)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    request_rate: float | None = Field(None, ge=MIN_REQUEST_RATE, le=MAX_RATE)  # requests/s, open loop
    ttft_p95_ms: float | None = Field(DEFAULT_TTFT_P95_MS, ge=MIN_SLO_MS, le=MAX_SLO_MS)
    tpot_ms: float | None = Field(DEFAULT_TPOT_MS, ge=MIN_SLO_MS, le=MAX_SLO_MS)
    min_tok_s_per_user: float | None = Field(None, ge=MIN_TOK_S_PER_USER, le=MAX_RATE)
    e2e_s: float | None = Field(None, ge=MIN_SLO_MS / 1e3, le=MAX_SLO_MS / 1e3)
    usd_per_gpu_hour: float | None = Field(None, ge=MIN_USD_PER_GPU_HOUR, lt=MAX_USD_PER_GPU_HOUR)
    gpu_memory_bandwidth_gb_s: float | None = Field(None, ge=MIN_MEMORY_BANDWIDTH_GB_S, le=MAX_RATE)  # HBM
    gpu_bf16_tflops: float | None = Field(None, ge=MIN_TFLOPS, le=MAX_RATE)  # dense BF16 TFLOPS
    # measured on a server (Live), a share of the card's streaming rate (calculator/speed/hardware.py)
    bandwidth_efficiency: float | None = Field(None, ge=MIN_EFFICIENCY, le=MAX_BANDWIDTH_EFFICIENCY)
    compute_efficiency: float | None = Field(None, ge=MIN_EFFICIENCY, le=1)
    endpoint: Endpoint = "completions"  # chat: vLLM 0.8.2-0.9.1 and 0.11.0 parse the chat template per request

    @property
    def slo(self) -> Slo:
        return Slo(ttft_p95_ms=self.ttft_p95_ms, tpot_ms=self.tpot_ms, min_tok_s_per_user=self.min_tok_s_per_user,
                   e2e_s=self.e2e_s)

    def traffic(self, workload: Workload) -> Traffic:
        """The workload's lengths under this load; ``InvalidInput`` when the speed model cannot take them."""
        if self.request_rate is not None:
            return traffic_from(workload, request_rate=self.request_rate, endpoint=self.endpoint)
        return traffic_from(workload, concurrency=workload.target_concurrent_requests, endpoint=self.endpoint)

    def with_gpu_rates(self, result: Estimate) -> Estimate:
        """``result`` with the rates given here on its GPU (as ``--gpu-memory-bandwidth-gb-s`` does)."""
        given = {k: v for k, v in (("memory_bandwidth_gb_s", self.gpu_memory_bandwidth_gb_s),
                                   ("bf16_dense_tflops", self.gpu_bf16_tflops)) if v is not None}
        if not given or result.gpu is None:
            return result
        return result.model_copy(update={"gpu": result.gpu.with_rates(**given)})

    def prices(self, gpu: GpuSpec | None) -> dict[str, GpuPrice]:
        """The price list with this GPU's price replaced by the one given here (if any)."""
        if self.usd_per_gpu_hour is None or gpu is None:
            return price_table()
        if gpu.key == CUSTOM_GPU_KEY:
            own = {gpu.key: GpuPrice(usd_per_gpu_hour=self.usd_per_gpu_hour, source="user price (dashboard)")}
        else:
            own = parse_price_overrides({gpu.key: self.usd_per_gpu_hour}, "dashboard")
        return price_table(own)

    def constants(self, platform: str) -> SpeedConstants | None:
        """The fitted constants with measured efficiencies in place (None: nothing measured, the fitted ones)."""
        measured = {k: v for k, v in (("bandwidth_efficiency", self.bandwidth_efficiency),
                                      ("compute_efficiency", self.compute_efficiency)) if v is not None}
        return constants_for(platform).model_copy(update=measured) if measured else None


# Scenario fields every recommended deployment runs with: LoRA slots, speculative decoding and --hf-overrides (their
# bounds are the Scenario's own, so the Recommend page, its link and the CLI accept what the Plan page does).
FEATURE_FIELDS = ("enable_lora", "max_loras", "max_lora_rank", "max_cpu_loras", "lora_dtype", "fully_sharded_loras",
                  "speculative_method", "speculative_model", "num_speculative_tokens", "draft_tensor_parallel_size",
                  "speculative_acceptance_rate", "hf_overrides")
_SCENARIO = Scenario.model_fields


class RecommendRequest(BaseModel):
    """What the recommender is asked beside the lengths, the load and the SLOs: the model, which GPUs (empty: the
    whole catalog), the most GPUs and dollars per hour, the vLLM version, ``max_model_len`` (None: the longest
    request's power of two), the user's prices per GPU-hour by catalog key, and the price list under them (None:
    the mixed default list; else a consistent set of ``prices.price_sets()``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    model: str = Field(DEFAULT_MODEL, min_length=1, max_length=MAX_MODEL_REFERENCE_CHARS)
    gpus: tuple[str, ...] = Field((), max_length=256)
    max_gpus: int | None = Field(None, ge=1, le=100_000)
    budget_per_hour: float | None = Field(None, gt=0, le=1e9)
    vllm_version: str = Field(LATEST_VERSION, max_length=64)
    max_model_len: int | None = Field(None, ge=1, le=MAX_CONTEXT_TOKENS)
    prices: dict[str, float] = Field(default_factory=dict, max_length=256)
    price_set: str | None = Field(None, max_length=64)
    enable_lora: bool = _SCENARIO["enable_lora"]
    max_loras: int = _SCENARIO["max_loras"]
    max_lora_rank: int = _SCENARIO["max_lora_rank"]
    max_cpu_loras: int | None = _SCENARIO["max_cpu_loras"]
    lora_dtype: Literal["auto", "float16", "bfloat16"] = _SCENARIO["lora_dtype"]
    fully_sharded_loras: bool = _SCENARIO["fully_sharded_loras"]
    speculative_method: SpeculativeMethod | None = _SCENARIO["speculative_method"]
    speculative_model: str | None = _SCENARIO["speculative_model"]
    num_speculative_tokens: int | None = _SCENARIO["num_speculative_tokens"]
    draft_tensor_parallel_size: int | None = _SCENARIO["draft_tensor_parallel_size"]
    speculative_acceptance_rate: float | None = _SCENARIO["speculative_acceptance_rate"]
    hf_overrides: str | None = _SCENARIO["hf_overrides"]  # checked (and made canonical) by the Scenario's rules
    bench: str | None = Field(None, max_length=2000)  # a `vllm bench serve` line: TTFT judged on its load

    @field_validator("bench")
    @classmethod
    def _bench_line(cls, line: str | None) -> str | None:
        line = (line or "").strip() or None
        if line is not None:
            parse_bench_command(line)  # NOTE: InvalidInput is a ValueError: a sentence under the field
        return line

    def bench_load(self) -> BenchLoad | None:
        return parse_bench_command(self.bench).load if self.bench else None

    @model_validator(mode="after")
    def _features_agree(self) -> RecommendRequest:
        Scenario(**self.features())  # NOTE: the Scenario's rules across fields (a draft model needs a method)
        return self

    def features(self) -> dict[str, object]:
        """The LoRA and speculative-decoding settings that differ from vLLM's defaults."""
        return {field: getattr(self, field) for field in FEATURE_FIELDS
                if getattr(self, field) != _SCENARIO[field].default}

    @field_validator("price_set")
    @classmethod
    def _known_price_set(cls, key: str | None) -> str | None:
        price_set(key)
        return key

    def price_overrides(self) -> dict[str, GpuPrice]:
        return parse_price_overrides(self.prices, "dashboard") if self.prices else {}

    def run(self, spec: ModelSpec, workload: Workload, speed: SpeedInputs) -> Recommendations:
        """Every deployment of ``spec`` for the workload's lengths under ``speed``'s load and SLOs."""
        return recommend(spec, speed.traffic(workload), speed.slo, gpus=self.gpus or None, max_gpus=self.max_gpus,
                         budget_per_hour=self.budget_per_hour, prices=self.price_overrides(),
                         vllm_version=self.vllm_version, max_model_len=self.max_model_len, price_set=self.price_set,
                         features=self.features(), bench=self.bench_load())

    def plan_inputs(self, option: Option, max_model_len: int, speed: SpeedInputs) -> tuple[Scenario, SpeedInputs]:
        """What opens ``option`` on the Plan page: its scenario, and the load and SLOs with this GPU's price."""
        scenario = option.deployment.scenario(self.model, self.vllm_version, max_model_len).replace(**self.features())
        price = self.prices.get(option.deployment.gpu)
        if price is None and self.price_set is not None:
            listed = price_set(self.price_set).prices.get(option.deployment.gpu)
            price = listed.usd_per_gpu_hour if listed else None
        return scenario, speed.model_copy(update={"usd_per_gpu_hour": price}) if price else speed


class SpeedPlan(BaseModel):
    """What the Plan page's Speed section shows: the plan for both ceilings and the two-ceilings sweep of one
    replica at the workload's lengths."""

    model_config = ConfigDict(frozen=True)
    ceilings: CeilingsPlan
    sweep: ConcurrencySweep
    slo: Slo
    layouts: LayoutPlan | None = None  # the other TP x PP layouts, each with why it loses (None: not asked)


def speed_plan(result: Estimate, workload: Workload, inputs: SpeedInputs, *, layouts: bool = False) -> SpeedPlan:
    """``result`` with the inputs' GPU rates, price and measured efficiencies, planned for the workload's load;
    ``InvalidInput`` (one line) when the speed model cannot answer (a CPU deployment, a GPU without rates)."""
    if not result.on_gpu:
        raise InvalidInput("the speed model covers GPUs; this deployment runs on the CPU, so no speed is predicted")
    traffic = inputs.traffic(workload)
    rated = inputs.with_gpu_rates(result)
    prices, constants = inputs.prices(rated.gpu), inputs.constants(rated.gpu.platform)
    ceilings = plan_both_ceilings(rated, workload, traffic, inputs.slo, prices=prices, constants=constants)
    sweep = concurrency_sweep(rated, traffic, prices=prices, constants=constants)
    others = layout_plan(rated, workload, traffic, inputs.slo, prices=prices, constants=constants,
                         chosen=ceilings) if layouts else None
    return SpeedPlan(ceilings=ceilings, sweep=sweep, slo=inputs.slo, layouts=others)
