"""The recommender: every deployment of a model across GPUs x TP (PP where needed) x weight quantization x KV dtype,
planned for a load and SLOs (both ceilings: memory and speed), ranked by cost; every other one with the reason it
is out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

from ..engine.estimate import estimate
from ..engine.expert_parallel import All2AllBackend, default_all2all_backend
from ..engine.vllm_versions import LATEST_VERSION, VllmVersion
from ..errors import CalculatorError, InvalidInput
from ..gpus import GpuSpec, find_gpu, gpu_catalog
from ..model.hf_overrides import with_hf_overrides
from ..model.spec import ModelSpec
from ..scenario import Scenario
from ..units import format_ms
from .bands import Regime, SpeedBands, bench_regime, speed_bands, ttft_band
from .bench import BenchLoad
from .ceilings import plan_both_ceilings, workload_of
from .plan import CapacityPlan, Slo, plan_at
from .predict import Band, bench_prediction
from .prices import GpuPrice, gpu_price, price_table
from .traffic import Traffic

TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)  # one node
PIPELINE_PARALLEL_SIZES = (2, 4)  # across nodes, tried only when TP 8 cannot hold the weights
# MoE models: one server of dp engines of one GPU each, experts split whole over the dp ranks (--data-parallel-size
# with --enable-expert-parallel, the layout DeepSeek-V3 / Kimi-K2 class models are served with on one node).
EXPERT_PARALLEL_DP_SIZES = (2, 4, 8)
# NOTE: profiled (7B, whole catalog, 20 req/s): 300 prompts took 71 s for 346 deployments, most of it in the ones
# the rate saturates (their running set grows); 100 took 11 s.
MAX_BENCH_PROMPTS = 100
FP8_KV_FAMILIES = frozenset({"ada", "hopper", "blackwell", "blackwell-rtx", "cdna3", "cdna4"})
NO_FP8_WEIGHT_FAMILIES = frozenset({"volta", "turing", "cdna2"})  # no FP8 kernels (not even W8A16 Marlin)


class Deployment(BaseModel):
    """One way to serve the model: GPU, parallelism, weight quantization flag and KV dtype."""

    model_config = ConfigDict(frozen=True)
    gpu: str  # catalog key
    gpu_name: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    quantization: str | None  # the --quantization flag (None: the checkpoint's own format)
    kv_cache_dtype: str
    data_parallel_size: int = 1  # engines in one server (--data-parallel-size); a replica below is one engine
    enable_expert_parallel: bool = False
    all2all_backend: All2AllBackend | None = None  # DP x EP: the one vLLM dispatches with (its default, or as set)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def scenario(self, model: str, vllm_version: str, max_model_len: int | None) -> Scenario:
        return Scenario(model=model, gpu=self.gpu, tensor_parallel_size=self.tensor_parallel_size,
                        pipeline_parallel_size=self.pipeline_parallel_size, quantization=self.quantization,
                        kv_cache_dtype=self.kv_cache_dtype, vllm_version=vllm_version, max_model_len=max_model_len,
                        data_parallel_size=self.data_parallel_size,
                        enable_expert_parallel=self.enable_expert_parallel,
                        # NOTE: vLLM's own default needs no flag (0.10 and older have no --all2all-backend at all)
                        all2all_backend=None if self.all2all_backend == default_all2all_backend(
                            VllmVersion.parse(vllm_version)) else self.all2all_backend)

    @property
    def layout(self) -> str:
        """"TP 2", "TP 8 PP 2", "DP 4 EP (allgather_reducescatter all-to-all)": how the GPUs of one replica (one
        server under DP) are used, and how a DP x EP server dispatches."""
        if self.data_parallel_size > 1:
            return (f"TP {self.tensor_parallel_size} " if self.tensor_parallel_size > 1 else "") + \
                f"DP {self.data_parallel_size}" + (" EP" if self.enable_expert_parallel else "") + \
                (f" ({self.all2all_backend} all-to-all)" if self.all2all_backend else "")
        return f"TP {self.tensor_parallel_size}" + (f" PP {self.pipeline_parallel_size}"
                                                    if self.pipeline_parallel_size > 1 else "")


class BenchTtft(BaseModel):
    """One replica's TTFT under the benchmark load (``vllm bench serve``), simulated step by step, and its band."""

    model_config = ConfigDict(frozen=True)
    arrival: str
    simulated_prompts: int  # the first of the run's prompts (MAX_BENCH_PROMPTS at most)
    ttft_p95_ms: float
    ttft_p99_ms: float  # what vLLM prints by default
    regime: Regime
    band: Band  # of the p95


class Option(BaseModel):
    """A deployment and its plan, or the reason it is out."""

    model_config = ConfigDict(frozen=True)
    deployment: Deployment
    plan: CapacityPlan | None = None
    reason: str | None = None  # None: fits, meets the SLOs and the limits
    bands: SpeedBands | None = None  # the planned replica's measured spread (and why it is wide, if it is)
    risks: tuple[str, ...] = ()  # each SLO met by the estimate but not at the pessimistic edge of its band
    bench: BenchTtft | None = None  # the benchmark load's TTFT (None: the steady load was given)

    @property
    def ttft_p95_ms(self) -> float:
        """The TTFT p95 ranked on: the benchmark load's when one was given, else the steady load's."""
        return self.bench.ttft_p95_ms if self.bench else self.plan.per_replica.ttft_p95_ms

    @property
    def ttft_p95_band(self) -> Band | None:
        return self.bench.band if self.bench else self.bands.ttft_p95_ms if self.bands else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def feasible(self) -> bool:
        return self.reason is None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def slo_status(self) -> Literal["met", "at risk"] | None:
        """"at risk" when an SLO holds only towards the optimistic edge of the band (None when out)."""
        if not self.feasible:
            return None
        return "at risk" if self.risks else "met"


class Recommendations(BaseModel):
    """Feasible options by cost per hour and by cost per million output tokens; the rest with reasons."""

    model_config = ConfigDict(frozen=True)
    traffic: Traffic
    slo: Slo
    max_model_len: int  # what every deployment was planned with
    price_set: str | None = None  # the consistent price set ranked on (None: the mixed default list)
    by_cost_per_hour: tuple[Option, ...]
    by_cost_per_million_tokens: tuple[Option, ...]
    by_ttft_p95: tuple[Option, ...] = ()  # the TTFT p95 of the load given, fastest first (then cheapest)
    rejected: tuple[Option, ...]
    bench: BenchLoad | None = None  # the benchmark load TTFT was judged on (None: the steady load)
    bench_prompts: int = 0  # of the benchmark run, how many prompts each deployment simulated

    @property
    def ttft_load(self) -> str:
        """Which load the TTFT figures assume, in words."""
        if self.bench is None:
            return self.traffic.arrival
        cut = (f"; the first {self.bench_prompts:,} of its {self.bench.num_prompts:,} prompts simulated"
               if self.bench_prompts < self.bench.num_prompts else "")
        return (f"the benchmark load on one replica ({self.bench.arrival}{cut}); the simulated run's p95 (vLLM "
                "prints p99 unless given --metric-percentiles 95)")


def layouts(spec: ModelSpec, expert_parallel: bool | None = None,
            data_parallel_size: int | None = None) -> list[tuple[int, int, bool]]:
    """(tp, dp, expert parallel) to try: TP alone, and for an MoE model DP x EP servers of one node.

    ``expert_parallel``: None tries both, True only the DP x EP layouts, False only TP; ``data_parallel_size``
    keeps the DP x EP layouts of that size."""
    plain = [(tp, 1, False) for tp in TENSOR_PARALLEL_SIZES] if expert_parallel is not True else []
    if spec.moe is None or expert_parallel is False:
        return plain
    sizes = (data_parallel_size,) if data_parallel_size else EXPERT_PARALLEL_DP_SIZES
    return plain + [(1, dp, True) for dp in sizes if dp > 1]


def candidates(spec: ModelSpec, gpus: Sequence[GpuSpec], quantizations: Sequence[str | None] | None = None,
               kv_cache_dtypes: Sequence[str] = ("auto", "fp8"), expert_parallel: bool | None = None,
               data_parallel_size: int | None = None, vllm_version: str = LATEST_VERSION,
               all2all_backend: All2AllBackend | None = None) -> list[tuple[Deployment, str | None]]:
    """Every deployment to try, with a reason already known to rule it out (None when it must be estimated); a
    DP x EP one dispatches with ``all2all_backend``, or else with what ``vllm_version`` picks by default."""
    dispatch = all2all_backend or default_all2all_backend(VllmVersion.parse(vllm_version))
    if quantizations is None:
        quantizations = (None,) if spec.quantization else (None, "fp8")
    out = []
    for gpu in gpus:
        for quantization in quantizations:
            for kv_dtype in kv_cache_dtypes:
                for tp, dp, ep in layouts(spec, expert_parallel, data_parallel_size):
                    reason = None
                    if quantization == "fp8" and gpu.family in NO_FP8_WEIGHT_FAMILIES:
                        reason = f"FP8 weights need Ampere or newer ({gpu.name} is {gpu.family})"
                    elif kv_dtype.startswith("fp8") and gpu.family not in FP8_KV_FAMILIES:
                        reason = ("FP8 KV cache needs FP8 hardware (Ada, Hopper, Blackwell, MI300+); "
                                  f"{gpu.name} has none")
                    elif spec.num_attention_heads % tp:
                        reason = f"TP {tp} does not divide the {spec.num_attention_heads} attention heads"
                    elif tp * dp > gpu.gpus_per_node:
                        reason = (f"{tp * dp} GPUs in one server, and a {gpu.name} node holds "
                                  f"{gpu.gpus_per_node}: layouts across nodes are not searched")
                    out.append((Deployment(gpu=gpu.key, gpu_name=gpu.name, tensor_parallel_size=tp,
                                           pipeline_parallel_size=1, quantization=quantization,
                                           kv_cache_dtype=kv_dtype, data_parallel_size=dp,
                                           enable_expert_parallel=ep,
                                           all2all_backend=dispatch if ep and dp > 1 else None), reason))
    return out


def recommend(spec: ModelSpec, traffic: Traffic, slo: Slo | None = None, *, gpus: Sequence[str] | None = None,
              max_gpus: int | None = None, budget_per_hour: float | None = None,
              quantizations: Sequence[str | None] | None = None, kv_cache_dtypes: Sequence[str] = ("auto", "fp8"),
              prices: Mapping[str, GpuPrice] | None = None, vllm_version: str = LATEST_VERSION,
              max_model_len: int | None = None, price_set: str | None = None,
              features: Mapping[str, object] | None = None, expert_parallel: bool | None = None,
              data_parallel_size: int | None = None, bench: BenchLoad | None = None) -> Recommendations:
    """Plan every deployment of ``spec`` for ``traffic`` and ``slo``; rank those that pass by cost (``prices`` over
    the default list, or over the consistent ``price_set``). ``features``: Scenario fields every candidate runs
    with (LoRA slots, speculative decoding; EPLB on the expert-parallel layouts only). ``expert_parallel``,
    ``data_parallel_size``: which DP x EP layouts an MoE model is also tried with (``layouts``). ``bench``: a ``vllm bench serve`` load each deployment's replica is
    simulated under (its first ``MAX_BENCH_PROMPTS`` prompts), whose TTFT p95 is then judged against the SLO and
    ranked on instead of the steady load's."""
    slo = slo or Slo()
    simulated = _first_prompts(bench, MAX_BENCH_PROMPTS) if bench else None
    if features and features.get("hf_overrides"):
        # NOTE: candidates are sized, filtered and run on the model vLLM builds with the overrides
        features = {**features, "hf_overrides": Scenario(hf_overrides=features["hf_overrides"]).hf_overrides}
        spec = with_hf_overrides(spec, features["hf_overrides"])
    _check_servable(spec, traffic, vllm_version, max_model_len)
    max_model_len = max_model_len or workload_model_len(spec, traffic)
    table = price_table(prices, price_set)
    # NOTE: a memory-mode variant (GH200 in NUMA mode) is the same hardware at the same price: ranked only on request.
    chosen = [find_gpu(name) for name in gpus] if gpus else [
        g for g in gpu_catalog() if g.memory_bandwidth_gb_s and g.variant_of is None]
    options: list[Option] = []
    for deployment, reason in candidates(spec, chosen, quantizations, kv_cache_dtypes, expert_parallel,
                                         data_parallel_size, vllm_version,
                                         (features or {}).get("all2all_backend")):  # type: ignore[arg-type]
        if reason:
            options.append(Option(deployment=deployment, reason=reason))
            continue
        option = _evaluate(spec, deployment, traffic, slo, table, vllm_version, max_model_len, features, simulated)
        if (option.reason == "weights exceed memory" and deployment.tensor_parallel_size == TENSOR_PARALLEL_SIZES[-1]
                and deployment.data_parallel_size == 1):
            option = _with_pipeline(spec, deployment, traffic, slo, table, vllm_version, max_model_len,
                                    features, simulated) or option
        options.append(_limits(option, max_gpus, budget_per_hour))
    feasible = [o for o in options if o.feasible]
    return Recommendations(
        traffic=traffic, slo=slo, max_model_len=max_model_len, price_set=price_set,
        by_cost_per_hour=tuple(sorted(feasible, key=lambda o: (o.plan.cost_per_hour, o.plan.gpus))),
        by_cost_per_million_tokens=tuple(sorted(feasible, key=lambda o: (o.plan.cost_per_million_output_tokens,
                                                                        o.plan.gpus))),
        by_ttft_p95=tuple(sorted(feasible, key=lambda o: (o.ttft_p95_ms, o.plan.cost_per_hour))),
        rejected=tuple(o for o in options if not o.feasible), bench=bench,
        bench_prompts=simulated.num_prompts if simulated else 0)


def _first_prompts(load: BenchLoad, count: int) -> BenchLoad:
    """The run cut to its first ``count`` prompts, sent as the whole run sends them (same rate, same loop)."""
    if load.num_prompts <= count:
        return load
    return load.model_copy(update={"input_tokens": load.input_tokens[:count],
                                   "output_tokens": load.output_tokens[:count]})


def _check_servable(spec: ModelSpec, traffic: Traffic, vllm_version: str, max_model_len: int | None) -> None:
    """``InvalidInput`` for a request no deployment could serve, said once rather than on every row."""
    VllmVersion.parse(vllm_version)
    longest = traffic.prompt_p95 + traffic.output_p95
    if max_model_len is not None and longest > max_model_len:
        raise InvalidInput(f"requests of {longest:,} tokens (p95 prompt + output) exceed max_model_len "
                           f"{max_model_len:,}: vLLM rejects them; raise --max-model-len")
    if max_model_len is not None and max_model_len > spec.derived_max_model_len:
        raise InvalidInput(f"max_model_len {max_model_len:,} is above the {spec.derived_max_model_len:,} tokens "
                           f"{spec.model_id} supports: vLLM refuses it (unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)")
    if longest > spec.derived_max_model_len:
        raise InvalidInput(f"requests of {longest:,} tokens (p95 prompt + output) exceed the "
                           f"{spec.derived_max_model_len:,} tokens {spec.model_id} supports: no deployment serves them")


def workload_model_len(spec: ModelSpec, traffic: Traffic) -> int:
    """The ``--max-model-len`` to plan with: the longest request (p95 prompt + p95 output) rounded up to a power
    of two, within what the model supports. Sizing for the model's full context would waste KV cache."""
    needed = traffic.prompt_p95 + traffic.output_p95
    return min(spec.derived_max_model_len, 1 << max(0, (needed - 1).bit_length()))


EPLB_FIELDS = ("enable_eplb", "num_redundant_experts")


def _for_layout(features: Mapping[str, object] | None, deployment: Deployment) -> Mapping[str, object] | None:
    """``features`` as ``deployment`` runs them: EPLB balances experts over expert-parallel ranks, so a layout
    without them runs with it off (vLLM refuses --enable-eplb there)."""
    if not features or deployment.enable_expert_parallel:
        return features
    return {field: value for field, value in features.items() if field not in EPLB_FIELDS}


def _evaluate(spec: ModelSpec, deployment: Deployment, traffic: Traffic, slo: Slo, prices: Mapping[str, GpuPrice],
              vllm_version: str, max_model_len: int | None, features: Mapping[str, object] | None = None,
              bench: BenchLoad | None = None) -> Option:
    steady_slo = slo.model_copy(update={"ttft_p95_ms": None}) if bench else slo  # NOTE: TTFT judged on the bench
    try:
        scenario = deployment.scenario(spec.model_id, vllm_version, max_model_len)
        settings = _for_layout(features, deployment)
        result = estimate(scenario.replace(**settings) if settings else scenario, spec)
    except CalculatorError as exc:
        return Option(deployment=deployment, reason=str(exc).split("\n")[0])
    if not result.fits:
        budget = result.budget
        if budget.weights_bytes >= budget.requested_bytes:
            return Option(deployment=deployment, reason="weights exceed memory")
        return Option(deployment=deployment, reason=_short(result.error or "does not start"))
    if gpu_price(find_gpu(deployment.gpu), prices) is None:
        return Option(deployment=deployment, reason=f"no price for {deployment.gpu_name} (give one to rank it)")
    try:
        # NOTE: both ceilings, as the Plan page counts them: a row opens there with the same replica count.
        plan = plan_both_ceilings(result, workload_of(traffic), traffic, steady_slo, prices=prices).plan
        dp = deployment.data_parallel_size
        if plan.replicas % dp:
            # NOTE: a DP server starts all its engines: the engines (replicas) come in whole servers of dp.
            plan = plan_at(result, -(-plan.replicas // dp) * dp, traffic, steady_slo, prices=prices)
    except CalculatorError as exc:
        return Option(deployment=deployment, reason=_short(str(exc)))
    bands = speed_bands(result, plan.per_replica)
    option = Option(deployment=deployment, plan=plan, reason=None if plan.meets_slo else "; ".join(plan.violations),
                    bands=bands, risks=slo_risks(plan, bands, steady_slo))
    if bench is None or option.reason:
        return option
    try:
        figures = bench_prediction(result, bench)
    except CalculatorError as exc:
        return option.model_copy(update={"reason": _short(str(exc))})
    regime = bench_regime(bench.max_concurrency, figures.mean_queue_ms)
    simulated = BenchTtft(arrival=figures.arrival, simulated_prompts=bench.num_prompts,
                          ttft_p95_ms=figures.p95_ttft_ms, ttft_p99_ms=figures.p99_ttft_ms, regime=regime,
                          band=ttft_band(figures.p95_ttft_ms, regime, bands.widened))
    return option.model_copy(update={"bench": simulated, **bench_verdict(simulated, slo, option.risks)})


def bench_verdict(simulated: BenchTtft, slo: Slo, risks: tuple[str, ...]) -> dict[str, object]:
    """The TTFT p95 SLO judged on the benchmark load: out when missed, at risk when only the optimistic edge of its
    band meets it (the Option fields to update)."""
    limit, value = slo.ttft_p95_ms, simulated.ttft_p95_ms
    if limit is None:
        return {}
    if value > limit:
        return {"reason": f"TTFT p95 {format_ms(value)} under the benchmark load > SLO {format_ms(limit)}"}
    if limit < simulated.band.high:
        return {"risks": (f"TTFT p95 {format_ms(value)} (benchmark load) meets {format_ms(limit)}, but its band "
                          f"reaches {format_ms(simulated.band.high)}", *risks)}
    return {}


def slo_risks(plan: CapacityPlan, bands: SpeedBands, slo: Slo) -> tuple[str, ...]:
    """Each SLO the plan meets at its estimate whose band reaches past it: it holds only if the run lands on the
    optimistic side, in words ("TTFT p95 1.2 s meets 2 s, but its band reaches 2.6 s")."""
    out = []
    per = plan.per_replica
    if slo.ttft_p95_ms is not None and per.ttft_p95_ms <= slo.ttft_p95_ms < bands.ttft_p95_ms.high:
        out.append(f"TTFT p95 {format_ms(per.ttft_p95_ms)} meets {format_ms(slo.ttft_p95_ms)}, but its band reaches "
                   f"{format_ms(bands.ttft_p95_ms.high)}")
    limit = slo.tpot_limit_ms
    if limit is not None and per.tpot_ms <= limit < bands.tpot_ms.high:
        out.append(f"ITL {format_ms(per.tpot_ms)} meets {format_ms(limit)}, but its band reaches "
                   f"{format_ms(bands.tpot_ms.high)}")
    return tuple(out)


def _with_pipeline(spec: ModelSpec, deployment: Deployment, traffic: Traffic, slo: Slo,
                   prices: Mapping[str, GpuPrice], vllm_version: str, max_model_len: int | None,
                   features: Mapping[str, object] | None = None, bench: BenchLoad | None = None) -> Option | None:
    """TP 8 cannot hold the weights: the smallest pipeline that can, if any."""
    for pp in PIPELINE_PARALLEL_SIZES:
        staged = deployment.model_copy(update={"pipeline_parallel_size": pp})
        option = _evaluate(spec, staged, traffic, slo, prices, vllm_version, max_model_len, features, bench)
        if option.reason != "weights exceed memory":
            return option
    return None


def _limits(option: Option, max_gpus: int | None, budget_per_hour: float | None) -> Option:
    plan = option.plan
    if option.reason or plan is None:
        return option
    if max_gpus is not None and plan.gpus > max_gpus:
        return option.model_copy(update={"reason": f"needs {plan.gpus} GPUs > {max_gpus} allowed"})
    if budget_per_hour is not None and plan.cost_per_hour is not None and plan.cost_per_hour > budget_per_hour:
        return option.model_copy(update={
            "reason": f"costs ${plan.cost_per_hour:,.2f}/h > budget ${budget_per_hour:,.2f}/h"})
    return option


def _short(message: str) -> str:
    first = message.strip().split("\n")[0]
    return first if len(first) <= 160 else first[:157] + "..."


__all__ = ["MAX_BENCH_PROMPTS", "BenchTtft", "Deployment", "Option", "Recommendations", "bench_verdict", "candidates",
           "layouts", "recommend", "slo_risks"]
