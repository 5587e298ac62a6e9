"""Parse a vLLM server's Prometheus ``/metrics`` into per-engine numbers (pure; internals notes §4).

Uses prometheus_client's own text parser. Handles both metric generations (``vllm:kv_cache_usage_perc`` since
0.9.2, ``vllm:gpu_cache_usage_perc`` before 0.12), engines (``engine`` label, data parallel; absent in 0.7)
and several served models. A hostile or broken server cannot make the page lie or stall: NaN and Inf samples are
dropped, impossible values (a negative count, a usage above 100 %, more requests than any server holds) are
clamped or dropped, each with a warning, and at most ``MAX_ENGINES`` engines and ``MAX_WARNINGS`` warnings are
kept — the snapshot says how many more there were.
"""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, computed_field

from ..errors import CalculatorError
from .quantile import Quantile, bounded_quantile

USAGE_METRICS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_swapped": "swapped",
}
MAX_ENGINES = 64  # data-parallel servers run a handful of engines; beyond this a /metrics is not one server's
MAX_WARNINGS = 20
# NOTE: prometheus_client's parser is pure Python (5,000-15,000 lines a second): an 8 MiB /metrics of histogram
# buckets held every refresh ~6 s past its deadline. One engine exposes ~280 lines of the families read here, so
# this leaves room for some 28 engines (a data-parallel server runs a handful) and keeps a parse near half a second.
MAX_PARSED_LINES = 8_000
MAX_REQUESTS = 10**7  # running, waiting, swapped: far above any one server's max_num_seqs
MAX_COUNTER = 1e18  # tokens served by one server's lifetime stay far below this
MAX_CONFIG_INT = 2**53  # cache_config_info integers (blocks, bytes, tokens) must be exact in a float
USAGE_TOLERANCE = 1e-6  # a fraction computed in float may overshoot 1 by rounding
_COUNTERS = {  # sample name -> field (exposed names end in _total)
    "vllm:num_preemptions_total": "preemptions_total",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_queries_total": "prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_hits_total": "prefix_cache_hits_total",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:generation_tokens_total": "generation_tokens_total",
    # vLLM's own roofline counters (0.11+): the bytes and FLOPs its forward passes moved, per GPU
    "vllm:estimated_read_bytes_per_gpu_total": "estimated_read_bytes_total",
    "vllm:estimated_flops_per_gpu_total": "estimated_flops_total",
}
_HISTOGRAMS = {
    "vllm:request_prompt_tokens": "prompt_tokens",
    "vllm:request_generation_tokens": "generation_tokens",
    "vllm:request_params_n": "params_n",
    "vllm:e2e_request_latency_seconds": "e2e_s",
    "vllm:request_queue_time_seconds": "queue_s",
    "vllm:time_to_first_token_seconds": "ttft_s",
    "vllm:inter_token_latency_seconds": "itl_s",
    "vllm:time_per_output_token_seconds": "tpot_s",  # the name before inter_token_latency_seconds (< 0.11)
    "vllm:request_prefill_time_seconds": "prefill_s",
    "vllm:request_decode_time_seconds": "decode_s",
}
_FINISHED = "vllm:request_success_total"  # one series per finished_reason: summed, and kept by reason


class NotVllmMetrics(CalculatorError):
    """The text is not Prometheus exposition from a vLLM server."""


class Histogram(BaseModel):
    """A Prometheus histogram: cumulative bucket counts by upper bound, plus sum and count."""

    model_config = ConfigDict(frozen=True)
    buckets: tuple[tuple[float, float], ...]  # (le, cumulative count), ascending, +Inf last
    sum: float
    count: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        """Like PromQL's histogram_quantile: linear interpolation inside the bucket holding the q-th value."""
        if not self.count or not self.buckets:
            return None
        rank, lower, below = q * self.count, 0.0, 0.0
        for upper, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(upper):
                    return lower  # the best a histogram can say: at least the last finite bound
                inside = cumulative - below
                return lower + (upper - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = upper, cumulative
        return lower

    def bounded_quantile(self, q: float) -> Quantile | None:
        """The q-quantile clamped into what the buckets, count and sum allow (``quantile.py``): what to show."""
        return bounded_quantile(self.buckets, self.sum, self.count, q)


class EngineMetrics(BaseModel):
    """One engine (one ``model_name``/``engine`` label pair) at one scrape."""

    model_config = ConfigDict(frozen=True)
    model_name: str
    engine: str
    running: float | None = None
    waiting: float | None = None
    swapped: float | None = None
    kv_cache_usage: float | None = None  # 0..1
    usage_metric: str | None = None  # which of USAGE_METRICS the server exposes
    preemptions_total: float | None = None
    prefix_cache_queries_total: float | None = None
    prefix_cache_hits_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    estimated_read_bytes_total: float | None = None  # per GPU
    estimated_flops_total: float | None = None  # per GPU
    requests_finished_total: float | None = None  # every finished_reason together
    finished_by_reason: dict[str, float] = {}
    cache_config: dict[str, str] | None = None
    histograms: dict[str, Histogram] = {}
    anomalies: tuple[str, ...] = ()  # values that were clamped or ignored (Prometheus readings; /metrics: warnings)

    def config_int(self, key: str) -> int | None:
        """An integer label of ``vllm:cache_config_info`` (``"None"`` and garbage give None)."""
        value = (self.cache_config or {}).get(key)
        try:
            number = float(value) if value not in (None, "None", "") else None
        except ValueError:
            return None
        return int(number) if number is not None and 0 <= number <= MAX_CONFIG_INT else None

    def config_float(self, key: str) -> float | None:
        value = (self.cache_config or {}).get(key)
        try:
            parsed = float(value) if value not in (None, "None", "") else None
        except ValueError:
            return None
        return parsed if parsed is not None and math.isfinite(parsed) else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def used_blocks(self) -> float | None:
        """Blocks in use: the gauge is 1 - free / (num_gpu_blocks - 1) (block 0 is the null block)."""
        blocks = self.config_int("num_gpu_blocks")
        if self.kv_cache_usage is None or not blocks:
            return None
        return self.kv_cache_usage * (blocks - 1)


class MetricsSnapshot(BaseModel):
    """Every engine of one scrape, plus what looked wrong in it."""

    model_config = ConfigDict(frozen=True)
    scraped_at: float
    engines: tuple[EngineMetrics, ...]
    warnings: tuple[str, ...] = ()
    engines_left_out: int = 0  # engines past MAX_ENGINES, not parsed
    warnings_left_out: int = 0

    def engine(self, model_name: str | None = None, engine: str | None = None) -> EngineMetrics | None:
        for candidate in self.engines:
            if (model_name is None or candidate.model_name == model_name) and (engine is None or candidate.engine == engine):
                return candidate
        return None


def _key(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("model_name", ""), labels.get("engine", "0")


_WANTED_FAMILIES = ("vllm:cache_config_info", *USAGE_METRICS, *_GAUGES, _FINISHED.removesuffix("_total"),
                    *(name.removesuffix("_total") for name in _COUNTERS), *_HISTOGRAMS)


def _wanted_lines(text: str) -> tuple[str, int]:
    """Only the families we read (latency histograms and HTTP metrics are most of the text), so the parser —
    pure Python — has a fraction of the work: a 60 KB /metrics parses several times faster. At most
    ``MAX_PARSED_LINES`` lines are kept; the second value counts the wanted lines left out."""
    kept, left_out = [], 0
    for line in text.splitlines():
        name = line[7:] if line.startswith("# TYPE ") else line
        if name.startswith(_WANTED_FAMILIES):
            if len(kept) < MAX_PARSED_LINES:
                kept.append(line)
            else:
                left_out += 1
    return "\n".join(kept) + "\n", left_out


def parse_metrics(text: str, scraped_at: float = 0.0) -> MetricsSnapshot:
    """Parse ``/metrics`` text; raises ``NotVllmMetrics`` for anything that is not vLLM's exposition."""
    if "vllm:" not in text:
        raise NotVllmMetrics("the response has no vllm:* metrics: this does not look like a vLLM server")
    wanted, lines_left_out = _wanted_lines(text)
    try:
        families = list(text_string_to_metric_families(wanted))
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:  # what the text parser raises
        raise NotVllmMetrics(f"the response is not Prometheus metrics text ({str(exc)[:200]})") from exc
    if not any(family.name.startswith("vllm:") for family in families):
        raise NotVllmMetrics("the response has no vllm:* metrics: this does not look like a vLLM server")
    fields: dict[tuple[str, str], dict] = {}
    cache_configs: dict[str, dict[str, str]] = {}  # by engine: cache_config_info carries no model_name
    buckets: dict[tuple[tuple[str, str], str], dict[str, object]] = {}
    warnings: list[str] = [f"{lines_left_out:,} more lines of vLLM metrics than this page reads "
                           f"({MAX_PARSED_LINES:,}); the rest were not read"] if lines_left_out else []
    left_out: set[tuple[str, str]] = set()

    def wanted(labels: dict[str, str]) -> bool:
        """At most MAX_ENGINES engines: later ones are counted, not parsed."""
        key = _key(labels)
        if key in fields or len(fields) < MAX_ENGINES:
            fields.setdefault(key, {})
            return True
        left_out.add(key)
        return False

    def put(labels: dict[str, str], name: str, value: object) -> None:
        fields[_key(labels)][name] = value

    for family in families:
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, _as_float(sample.value)
            if name == "vllm:cache_config_info":
                if len(cache_configs) < MAX_ENGINES:
                    cache_configs[labels.get("engine", "0")] = {k: v[:200] for k, v in labels.items() if k != "engine"}
                continue
            if not (name in _GAUGES or name in USAGE_METRICS or name in _COUNTERS or name == _FINISHED
                    or name.rpartition("_")[0] in _HISTOGRAMS) or not labels.get("model_name") or not wanted(labels):
                continue
            if name in _GAUGES or name in USAGE_METRICS or name in _COUNTERS or name == _FINISHED:
                checked = admit(name, labels, value, warnings)
                if checked is None:
                    continue
                if name in _GAUGES:
                    put(labels, _GAUGES[name], checked)
                elif name in USAGE_METRICS:
                    put(labels, "kv_cache_usage", checked)
                    put(labels, "usage_metric", name)
                elif name == _FINISHED:
                    slot = fields[_key(labels)]
                    slot["requests_finished_total"] = slot.get("requests_finished_total", 0.0) + checked
                    slot.setdefault("finished_by_reason", {})[labels.get("finished_reason", "")[:40]] = checked
                else:
                    put(labels, _COUNTERS[name], checked)
            elif not math.isfinite(value) and not name.endswith("_bucket"):
                warnings.append(f"{_series(name, labels)} is {value}; ignored")
            else:
                base, _, part = name.rpartition("_")
                if part in ("bucket", "sum", "count") and (part == "bucket" or math.isfinite(value)):
                    slot = buckets.setdefault((_key(labels), _HISTOGRAMS[base]), {"buckets": []})
                    if part == "bucket":
                        slot["buckets"].append((labels.get("le", "?"), value))  # type: ignore[union-attr]
                    else:
                        slot[part] = value
    for (key, name), slot in buckets.items():
        if "sum" in slot and "count" in slot:
            histogram = histogram_from_parts(slot["buckets"], slot["count"], slot["sum"])  # type: ignore[arg-type]
            if histogram is None:
                warnings.append(f"the {name} histogram of {key[0]} (engine {key[1]}) is not a valid histogram "
                                "(a bad bound, a NaN, a negative or decreasing count); ignored")
            else:
                fields[key].setdefault("histograms", {})[name] = histogram
    engines = tuple(EngineMetrics(model_name=model, engine=engine, cache_config=cache_configs.get(engine), **values)
                    for (model, engine), values in sorted(fields.items()))
    return MetricsSnapshot(scraped_at=scraped_at, engines=engines, warnings=tuple(warnings[:MAX_WARNINGS]),
                           engines_left_out=len(left_out), warnings_left_out=max(0, len(warnings) - MAX_WARNINGS))


def _as_float(value: float) -> float:
    """The parser keeps integers as Python ints, which can be too large for a float: those are infinite here."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def admit(name: str, labels: dict[str, str], value: float, warnings: list[str]) -> float | None:
    """A gauge, usage or counter sample as the page may show it: NaN/Inf and impossible counts are dropped and a
    usage outside 0-1 is clamped, each with a warning naming the series."""
    if not math.isfinite(value):
        warnings.append(f"{_series(name, labels)} is {value}; ignored")
        return None
    if name in USAGE_METRICS:
        usage = min(max(value, 0.0), 1.0)
        if abs(usage - value) > USAGE_TOLERANCE:
            warnings.append(f"{_series(name, labels)} is {value:g}, outside 0-1 (0-100 %); shown as {usage:.0%}")
        return usage
    if name in _GAUGES and not 0 <= value <= MAX_REQUESTS:
        warnings.append(f"{_series(name, labels)} is {value:g}, impossible for a count of requests; ignored")
        return None
    if name not in _GAUGES and not 0 <= value <= MAX_COUNTER:
        warnings.append(f"{_series(name, labels)} is {value:g}, impossible for a counter; ignored")
        return None
    return value


def histogram_from_parts(buckets: list[tuple[str, float]], total: float, summed: float) -> Histogram | None:
    """Cumulative counts by ``le`` label text, or None when they cannot be a histogram (a bad, NaN or repeated
    bound, a NaN, a negative or decreasing count, an +Inf bucket that disagrees with the count)."""
    try:
        pairs = sorted((float(le), count) for le, count in buckets)
    except ValueError:
        return None
    bounds = [le for le, _ in pairs]
    if any(math.isnan(le) or le == -math.inf for le in bounds) or len(set(bounds)) < len(bounds):
        return None  # NOTE: a NaN bound sorts anywhere and breaks every quantile; a repeated one is two series
    counts = [count for _, count in pairs]
    if (not all(math.isfinite(c) for c in counts) or not math.isfinite(total) or not math.isfinite(summed)
            or any(b < a for a, b in zip(counts, counts[1:])) or (counts and counts[0] < 0) or total < 0
            or summed < 0 or (pairs and math.isinf(pairs[-1][0]) and pairs[-1][1] != total)):
        return None
    return Histogram(buckets=tuple(pairs), sum=summed, count=total)


def _series(name: str, labels: dict[str, str]) -> str:
    text = name + "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"
    return text if len(text) <= 160 else text[:157] + "..."


class Rates(BaseModel):
    """What changed between two scrapes of one engine, per second (None when a counter went down)."""

    model_config = ConfigDict(frozen=True)
    interval_s: float
    preemptions_per_s: float | None
    prompt_tokens_per_s: float | None
    generation_tokens_per_s: float | None
    prefix_cache_hit_rate: float | None  # hits / queries over the interval
    restarted: bool  # a counter decreased: the server restarted between the scrapes


def rates(previous: EngineMetrics, current: EngineMetrics, interval_s: float) -> Rates:
    """Counter deltas over ``interval_s``; a decrease means the server restarted and that interval is void."""
    def delta(name: str) -> float | None:
        before, after = getattr(previous, name), getattr(current, name)
        if before is None or after is None or after < before:
            return None
        return after - before

    restarted = any(getattr(current, n) is not None and getattr(previous, n) is not None
                    and getattr(current, n) < getattr(previous, n) for n in set(_COUNTERS.values()))
    per_second = (lambda value: None if value is None or interval_s <= 0 or restarted else value / interval_s)
    queries, hits = delta("prefix_cache_queries_total"), delta("prefix_cache_hits_total")
    return Rates(interval_s=interval_s, preemptions_per_s=per_second(delta("preemptions_total")),
                 prompt_tokens_per_s=per_second(delta("prompt_tokens_total")),
                 generation_tokens_per_s=per_second(delta("generation_tokens_total")),
                 prefix_cache_hit_rate=None if restarted or not queries else (hits or 0.0) / queries,
                 restarted=restarted)
