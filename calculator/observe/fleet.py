"""Many vLLM replicas, one capacity picture (pure): replicas from Prometheus query results, grouped by served
model and chosen labels, flagged when saturated or idle, and a fleet capacity plan.

A *replica* is one KV-cache pool: one engine (``engine`` label) of one scrape target (``job``, ``instance``).
Its numbers over a time range come from the series at the range's start and end (counter increases, length
histograms) and from the gauges over the range (peaks). Its real capacity comes from ``vllm:cache_config_info``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, computed_field

from ..engine.estimate import Estimate, estimate
from ..engine.workload import Workload, workload_capacity
from ..errors import CalculatorError
from ..model.spec import ModelSpec
from ..scenario import Scenario
from .fleet_client import FleetReading, Sample, Series
from .live import NEARLY_FULL_USAGE, scenario_from_server, workload_from_server
from .live_client import ServerModel
from .metrics import (
    _COUNTERS,
    _GAUGES,
    _HISTOGRAMS,
    USAGE_METRICS,
    EngineMetrics,
    Histogram,
    admit,
    histogram_from_parts,
)
from .promql import CACHE_CONFIG_METRIC

REPLICA_LABELS = ("job", "instance", "engine")
MODEL_LABEL = "model_name"
NOT_GROUPABLE = frozenset({"__name__", "le", "engine", MODEL_LABEL})
ESTIMATE_TOLERANCE = 0.05  # relative difference in num_gpu_blocks above which a replica is flagged
_RANGE_COUNTERS = ("preemptions_total", "prompt_tokens_total", "generation_tokens_total",
                   "prefix_cache_hits_total", "prefix_cache_queries_total")

ReplicaKey = tuple[str, ...]


def _replica_key(labels: dict[str, str]) -> ReplicaKey:
    return tuple(labels.get(name, "0" if name == "engine" else "") for name in REPLICA_LABELS)


def engine_from_samples(samples: Iterable[Sample]) -> EngineMetrics | None:
    """One replica's series at one instant as ``EngineMetrics`` (the same fields /metrics parsing fills)."""
    samples = list(samples)
    served = next((s for s in samples if s.labels.get("__name__") != CACHE_CONFIG_METRIC and MODEL_LABEL in s.labels),
                  None)
    if served is None:
        return None
    target = {k: v for k, v in served.labels.items() if k not in ("__name__", "le")}
    fields: dict[str, Any] = {}
    parts: dict[str, dict] = defaultdict(lambda: {"buckets": []})
    cache_config, anomalies = None, []
    for sample in samples:
        name = sample.labels.get("__name__", "")
        if name == CACHE_CONFIG_METRIC:
            # NOTE: cache_config_info carries the target's labels too (job, instance, namespace...): drop them.
            cache_config = {k: v[:200] for k, v in sample.labels.items() if k != "__name__" and k not in target}
        elif name in _GAUGES or name in USAGE_METRICS or name in _COUNTERS:
            value = admit(name, sample.labels, sample.value, anomalies)
            if value is None:
                continue
            if name in _GAUGES:
                fields[_GAUGES[name]] = value
            elif name in _COUNTERS:
                fields[_COUNTERS[name]] = value
            elif fields.get("usage_metric") != USAGE_METRICS[0]:  # the current name wins when both are exposed
                fields["kv_cache_usage"], fields["usage_metric"] = value, name
        else:
            base, _, part = name.rpartition("_")
            if base in _HISTOGRAMS and part == "bucket":
                parts[_HISTOGRAMS[base]]["buckets"].append((sample.labels.get("le", "?"), sample.value))
            elif base in _HISTOGRAMS and part in ("sum", "count"):
                parts[_HISTOGRAMS[base]][part] = sample.value
    histograms = {}
    for name, p in parts.items():
        if "sum" in p and "count" in p:
            histogram = histogram_from_parts(p["buckets"], p["count"], p["sum"])
            if histogram is None:
                anomalies.append(f"the {name} histogram is not a valid histogram; ignored")
            else:
                histograms[name] = histogram
    return EngineMetrics(model_name=served.labels[MODEL_LABEL][:200], engine=served.labels.get("engine", "0")[:40],
                         cache_config=cache_config, histograms=histograms, anomalies=tuple(anomalies[:5]), **fields)


def _increase(before: float | None, after: float | None) -> float | None:
    """A counter's increase between two reads, without Prometheus's extrapolation (exact, and equal to /metrics)."""
    # NOTE: no value at the start means the replica appeared within the range (counters start at 0); a value that
    # went down means it restarted, so what it counts now all happened within the range.
    if after is None:
        return None
    if before is None or after < before:
        return after
    return after - before


def histogram_increase(before: Histogram | None, after: Histogram | None) -> Histogram | None:
    if after is None:
        return None
    if before is None or after.count < before.count:
        return after
    previous = dict(before.buckets)
    return Histogram(buckets=tuple((le, _increase(previous.get(le), count) or 0.0) for le, count in after.buckets),
                     sum=after.sum - before.sum, count=after.count - before.count)


def merge_histograms(histograms: Iterable[Histogram | None]) -> Histogram | None:
    """Several replicas' histograms as one; bounds that differ (vLLM sizes them by max_model_len) are merged on
    their union, each histogram counting at a bound what it counted at its nearest bound below."""
    present = [h for h in histograms if h is not None]
    if not present:
        return None
    bounds = sorted({le for h in present for le, _ in h.buckets})

    def cumulative_at(h: Histogram, bound: float) -> float:
        return max((count for le, count in h.buckets if le <= bound), default=0.0)

    return Histogram(buckets=tuple((le, sum(cumulative_at(h, le) for h in present)) for le in bounds),
                     sum=sum(h.sum for h in present), count=sum(h.count for h in present))


class Replica(BaseModel):
    """One KV pool: its state at the range's end, what it did over the range, and its real capacity."""

    model_config = ConfigDict(frozen=True)
    labels: dict[str, str]  # the target's labels (job, instance, pod, namespace, ...) plus model_name and engine
    now: EngineMetrics
    range_s: float
    increases: dict[str, float | None]  # _RANGE_COUNTERS over the range
    histograms: dict[str, Histogram]  # request lengths seen within the range
    peak_running: float | None = None
    peak_waiting: float | None = None
    peak_usage: float | None = None
    saturated_steps: int = 0  # range steps with the cache nearly full and requests waiting

    @computed_field  # type: ignore[prop-decorator]
    @property
    def name(self) -> str:
        instance = self.labels.get("pod") or self.labels.get("instance") or "?"  # pod names outlive pod IPs
        return instance if self.now.engine == "0" else f"{instance} engine {self.now.engine}"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def usable_blocks(self) -> int | None:
        blocks = self.now.config_int("num_gpu_blocks")
        return blocks - 1 if blocks else None  # block 0 is the null block

    @computed_field  # type: ignore[prop-decorator]
    @property
    def kv_groups(self) -> int:
        """KV-cache groups sharing the pool (hybrid models), from what vLLM reports: blocks x size / tokens."""
        blocks, block = self.now.config_int("num_gpu_blocks"), self.now.config_int("block_size")
        tokens = self.now.config_int("kv_cache_size_tokens")
        return max(1, round(blocks * block / tokens)) if blocks and block and tokens else 1

    @computed_field  # type: ignore[prop-decorator]
    @property
    def max_model_len(self) -> int | None:
        """vLLM reports kv_cache_max_concurrency = KV tokens / max_model_len (single-group models)."""
        tokens = self.now.config_int("kv_cache_size_tokens")
        concurrency = self.now.config_float("kv_cache_max_concurrency")
        return round(tokens / concurrency) if tokens and concurrency and self.kv_groups == 1 else None

    def per_second(self, counter: str) -> float | None:
        value = self.increases.get(counter)
        return value / self.range_s if value is not None and self.range_s > 0 else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def prefix_cache_hit_rate(self) -> float | None:
        queries = self.increases.get("prefix_cache_queries_total")
        return (self.increases.get("prefix_cache_hits_total") or 0.0) / queries if queries else None


def replicas_from_reading(reading: FleetReading) -> list[Replica]:
    """The replicas present at the range's end, with their increases and peaks over it."""
    def by_replica(samples: Sequence[Sample]) -> dict[ReplicaKey, list[Sample]]:
        grouped: dict[ReplicaKey, list[Sample]] = defaultdict(list)
        for sample in samples:
            grouped[_replica_key(sample.labels)].append(sample)
        return grouped

    ends, starts = by_replica(reading.at_end), by_replica(reading.at_start)
    ranges: dict[ReplicaKey, dict[str, dict[float, float]]] = defaultdict(dict)
    for series in reading.over_range:
        name = series.labels.get("__name__", "")
        ranges[_replica_key(series.labels)].setdefault(name, {}).update(series.points)
    replicas = []
    for key, samples in sorted(ends.items()):
        now = engine_from_samples(samples)
        if now is None:
            continue
        before = engine_from_samples(starts.get(key, []))
        increases = {c: _increase(getattr(before, c, None), getattr(now, c)) for c in _RANGE_COUNTERS}
        histograms = {name: h for name in now.histograms
                      if (h := histogram_increase((before.histograms if before else {}).get(name),
                                                  now.histograms[name])) is not None}
        gauges = ranges.get(key, {})
        running, waiting = gauges.get("vllm:num_requests_running", {}), gauges.get("vllm:num_requests_waiting", {})
        usage = gauges.get(USAGE_METRICS[0]) or gauges.get(USAGE_METRICS[1]) or {}
        saturated = sum(1 for t, u in usage.items() if u >= NEARLY_FULL_USAGE and waiting.get(t, 0) > 0)
        labels = {k: v for k, v in next(s for s in samples if MODEL_LABEL in s.labels).labels.items()
                  if k not in ("__name__", "le")}
        replicas.append(Replica(labels=labels, now=now, range_s=reading.time_range.duration_s, increases=increases,
                                histograms=histograms, peak_running=max(running.values(), default=None),
                                peak_waiting=max(waiting.values(), default=None),
                                peak_usage=max(usage.values(), default=None), saturated_steps=saturated))
    return replicas


def groupable_labels(replicas: Iterable[Replica]) -> list[str]:
    """Labels a person may group by (pod, instance, namespace, job, ...): what the replicas carry."""
    return sorted({k for r in replicas for k in r.labels} - NOT_GROUPABLE)


class ReplicaGroup(BaseModel):
    """Replicas of one served model with the same values of the chosen labels, and their load over the range."""

    model_config = ConfigDict(frozen=True)
    key: dict[str, str]  # model_name and the chosen labels
    replicas: tuple[Replica, ...]
    times: tuple[float, ...]  # the range's steps
    running: tuple[float, ...]  # summed over every series of the group, also replicas gone by the end
    waiting: tuple[float, ...]
    used_tokens: tuple[float, ...]  # KV tokens in use, replicas present at the end

    @computed_field  # type: ignore[prop-decorator]
    @property
    def title(self) -> str:
        rest = ", ".join(f"{k}={v or '(none)'}" for k, v in self.key.items() if k != MODEL_LABEL)
        return self.key[MODEL_LABEL] + (f" · {rest}" if rest else "")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def peak_demand(self) -> float:
        """The most requests in the group at once (running + waiting) at any step of the range."""
        return max((r + w for r, w in zip(self.running, self.waiting)), default=0.0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def kv_cache_tokens(self) -> int:
        return sum(r.now.config_int("kv_cache_size_tokens") or 0 for r in self.replicas)


def group_replicas(replicas: Sequence[Replica], over_range: Sequence[Series],
                   by: Sequence[str] = ()) -> list[ReplicaGroup]:
    """Group by served model and the ``by`` labels; the load over time sums every series of the group."""
    names = (MODEL_LABEL, *(label for label in by if label != MODEL_LABEL))

    def key_of(labels: dict[str, str]) -> tuple[str, ...]:
        return tuple(labels.get(name, "") for name in names)

    members: dict[tuple[str, ...], list[Replica]] = defaultdict(list)
    for replica in replicas:
        members[key_of(replica.labels)].append(replica)
    capacity = {_replica_key(r.labels): r.now.config_int("kv_cache_size_tokens") for r in replicas}
    # NOTE: vLLM 0.9.2-0.11 expose both usage gauges; count the current one only, or tokens would double.
    current_usage = {_replica_key(s.labels) for s in over_range if s.labels.get("__name__") == USAGE_METRICS[0]}
    sums: dict[tuple[str, ...], dict[str, dict[float, float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float)))
    for series in over_range:
        name, key = series.labels.get("__name__", ""), key_of(series.labels)
        if key not in members or MODEL_LABEL not in series.labels:
            continue
        if name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
            for t, value in series.points:
                sums[key][name][t] += value
        elif name in USAGE_METRICS and (tokens := capacity.get(owner := _replica_key(series.labels))):
            if name == USAGE_METRICS[1] and owner in current_usage:
                continue
            for t, value in series.points:
                sums[key]["tokens"][t] += value * tokens
    groups = []
    for key, group in sorted(members.items()):
        load = sums[key]
        times = tuple(sorted({t for values in load.values() for t in values}))
        groups.append(ReplicaGroup(
            key=dict(zip(names, key)), replicas=tuple(group), times=times,
            running=tuple(load["vllm:num_requests_running"].get(t, 0.0) for t in times),
            waiting=tuple(load["vllm:num_requests_waiting"].get(t, 0.0) for t in times),
            used_tokens=tuple(load["tokens"].get(t, 0.0) for t in times)))
    return groups


class Flag(BaseModel):
    model_config = ConfigDict(frozen=True)
    kind: str  # "saturated", "idle" or "estimate"
    message: str


def flags(replica: Replica, estimated_blocks: int | None = None) -> list[Flag]:
    """Saturated (cache nearly full with a queue, or preemptions), idle, or unlike the estimate."""
    found, now = [], replica.now
    preempted = replica.increases.get("preemptions_total") or 0
    full_now = (now.kv_cache_usage or 0) >= NEARLY_FULL_USAGE and (now.waiting or 0) > 0
    if full_now or replica.saturated_steps or preempted:
        reasons = [f"KV cache {now.kv_cache_usage:.0%} full with {now.waiting:.0f} waiting now"] if full_now else []
        if replica.saturated_steps:
            reasons.append(f"nearly full with requests waiting at {replica.saturated_steps} step(s) of the range")
        if preempted:
            reasons.append(f"{preempted:,.0f} preemption(s) in the range")
        found.append(Flag(kind="saturated", message=f"{replica.name} is saturated: {'; '.join(reasons)}"))
    if not replica.peak_running and not replica.peak_waiting and not replica.increases.get("generation_tokens_total"):
        found.append(Flag(kind="idle", message=f"{replica.name} served nothing in the range"))
    actual = replica.now.config_int("num_gpu_blocks")
    if estimated_blocks and actual and abs(estimated_blocks - actual) > ESTIMATE_TOLERANCE * actual:
        found.append(Flag(kind="estimate", message=f"{replica.name} has {actual:,} KV blocks; the estimate for its "
                                                   f"settings is {estimated_blocks:,}"))
    return found


def observed_workload(replicas: Sequence[Replica], target: int = 1) -> Workload | None:
    """The lengths the replicas saw within the range (merged histograms, p95 and mean) as a Workload."""
    merged = {name: merge_histograms(r.histograms.get(name) for r in replicas)
              for name in ("prompt_tokens", "generation_tokens", "params_n")}
    hits = sum(r.increases.get("prefix_cache_hits_total") or 0 for r in replicas)
    queries = sum(r.increases.get("prefix_cache_queries_total") or 0 for r in replicas)
    fleet = EngineMetrics(model_name="fleet", engine="fleet", prefix_cache_hits_total=hits,
                          prefix_cache_queries_total=queries, histograms={k: v for k, v in merged.items() if v})
    return workload_from_server(fleet, None, target)


def requests_that_fit(replica: Replica, workload: Workload) -> int | None:
    """Requests of the workload's p95 lengths that fit in the replica's real pool at once (vllm:cache_config_info)."""
    # NOTE: counted as vLLM allocates full attention (workload.py's rule): the shared prefix's full blocks once,
    # then each request's own prompt blocks and, per sample, its tail and output blocks. Prometheus does not know
    # the model's layout, so a hybrid model's groups each count in full (conservative for sliding windows).
    blocks, block = replica.usable_blocks, replica.now.config_int("block_size")
    if not blocks or not block:
        return None
    prompt = workload.prompt_tokens_p95 or workload.prompt_tokens_mean
    output = workload.output_tokens_p95 if workload.output_tokens_p95 is not None else workload.output_tokens_mean
    total = min(prompt + output, replica.max_model_len or prompt + output)
    prompt = min(prompt, total)
    prefix = min(workload.shared_prefix_tokens, prompt) // block
    prompt_full = prompt // block
    private = (prompt_full - prefix + (math.ceil(total / block) - prompt_full) * workload.parallel_samples)
    private, prefix = private * replica.kv_groups, prefix * replica.kv_groups
    return max(0, (blocks - prefix) // private) if private else 0


class FleetPlan(BaseModel):
    """Replicas like the current ones needed for a target number of concurrent requests, with headroom."""

    model_config = ConfigDict(frozen=True)
    workload: Workload
    target_concurrent_requests: int
    headroom_percent: int
    per_replica: dict[str, int]  # replica name -> requests of the workload's p95 lengths that fit at once
    replicas_now: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def required_concurrent_requests(self) -> int:
        return -(-self.target_concurrent_requests * (100 + self.headroom_percent) // 100)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def fleet_concurrent_requests(self) -> int:
        return sum(self.per_replica.values())

    @computed_field  # type: ignore[prop-decorator]
    @property
    def replicas_needed(self) -> int | None:
        """ceil(required / mean per replica), in integers; None when no replica holds one request."""
        if not self.fleet_concurrent_requests:
            return None
        return -(-self.required_concurrent_requests * len(self.per_replica) // self.fleet_concurrent_requests)


def fleet_plan(group: ReplicaGroup, workload: Workload, target: int | None = None,
               headroom_percent: int = 20) -> FleetPlan:
    """The plan for one group; ``target`` None plans for the group's observed peak demand."""
    goal = max(1, math.ceil(group.peak_demand)) if target is None else max(1, target)
    per_replica = {r.name: fits for r in group.replicas if (fits := requests_that_fit(r, workload)) is not None}
    return FleetPlan(workload=workload.model_copy(update={"target_concurrent_requests": goal}),
                     target_concurrent_requests=goal, headroom_percent=headroom_percent, per_replica=per_replica,
                     replicas_now=len(group.replicas))


def replica_scenario(replica: Replica, base: Scenario) -> Scenario:
    """``base`` (model, GPU, dtype, vLLM version chosen by the user) with the settings the replica reports."""
    model = ServerModel(id=replica.now.model_name, max_model_len=replica.max_model_len)
    return scenario_from_server(replica.now, model, None, base)


class WhatIf(BaseModel):
    """The fleet on a changed deployment: requests per replica and replicas for the required load."""

    model_config = ConfigDict(frozen=True)
    description: str
    scenario: Scenario
    error: str | None = None
    concurrency_per_replica: int = 0
    gpus_per_replica: int = 0
    replicas: int | None = None
    notes: tuple[str, ...] = ()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_gpus(self) -> int | None:
        return self.replicas * self.gpus_per_replica if self.replicas is not None else None


def gpu_change(gpu: str) -> dict[str, object]:
    """Moving to a catalog GPU: its platform and memory, so a CPU server's KV space and override no longer apply."""
    return {"gpu": gpu, "device": None, "gpu_memory_gib": None, "kv_cache_memory_bytes": None}


def what_if(deployed: Scenario, spec: ModelSpec, workload: Workload, required: int, description: str,
            changes: dict[str, object]) -> WhatIf:
    """Ask the engine what ``changes`` give; the KV pool is sized from memory (a block override is dropped)."""
    try:
        scenario = deployed.replace(num_gpu_blocks_override=None, **changes)
        result: Estimate = estimate(scenario, spec)
    except (CalculatorError, ValueError) as exc:
        return WhatIf(description=description, scenario=deployed, error=str(exc).split("\n")[0])
    if not result.fits:
        return WhatIf(description=description, scenario=scenario, error=result.error or "does not fit")
    capacity = workload_capacity(result, workload)
    per_replica = capacity.concurrency_p95
    notes = []
    longest = (workload.prompt_tokens_p95 or workload.prompt_tokens_mean) + (workload.output_tokens_p95 or 0)
    if longest > result.settings.max_model_len:
        notes.append(f"p95 requests ({longest:,} tokens) exceed max_model_len {result.settings.max_model_len:,}: "
                     "vLLM would reject them")
    return WhatIf(description=description, scenario=scenario, concurrency_per_replica=per_replica,
                  gpus_per_replica=result.num_gpus, replicas=-(-required // per_replica) if per_replica else None,
                  notes=tuple(notes))
