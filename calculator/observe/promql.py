"""PromQL for the fleet view, built from validated parts (pure).

Every label value a person types is escaped, label and metric names are checked against Prometheus's grammar,
and a time range is bounded in length and in points, so no input can turn into an unbounded or injected query:

    selector(("vllm:num_requests_running",), [Matcher(name="namespace", value='a"b')])
    -> {__name__=~"vllm:num_requests_running",namespace="a\\"b"}
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict, computed_field, model_validator

from ..errors import CalculatorError
from .metrics import _COUNTERS, _GAUGES, _HISTOGRAMS, USAGE_METRICS

METRIC_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
MIN_STEP_S = 1  # Prometheus's resolution is milliseconds, but scrapes are seconds apart
MAX_RANGE_S = 7 * 24 * 3600  # a week of 1 s-scraped vLLM series is already millions of samples
MAX_POINTS = 1000  # per series; Prometheus itself refuses more than 11,000
Operator = Literal["=", "!=", "=~", "!~"]


class InvalidQuery(CalculatorError):
    """A filter, name or time range that cannot become a bounded PromQL query.

    # NOTE: deliberately not a ValueError, so pydantic validators pass it through unchanged.
    """

# The series the fleet view reads, all in one selector: gauges, counters (their ``_total`` samples), the
# length histograms and the cache config. Names come from metrics.py so /metrics and Prometheus agree.
CACHE_CONFIG_METRIC = "vllm:cache_config_info"
INSTANT_METRICS = tuple(sorted({
    CACHE_CONFIG_METRIC, *USAGE_METRICS, *_GAUGES, *_COUNTERS,
    *(f"{name}_{part}" for name in _HISTOGRAMS for part in ("bucket", "sum", "count")),
}))
RANGE_METRICS = tuple(sorted({"vllm:num_requests_running", "vllm:num_requests_waiting", *USAGE_METRICS}))
SERIES_METRIC = "vllm:num_requests_running"  # every vLLM version exposes it, once per engine


class Matcher(BaseModel):
    """One label matcher, ``name op "value"``; the value is escaped when rendered."""

    model_config = ConfigDict(frozen=True)
    name: str
    op: Operator = "="
    value: str

    @model_validator(mode="after")
    def _valid_name(self) -> Matcher:
        if not LABEL_NAME_RE.match(self.name) or self.name == "__name__":
            raise InvalidQuery(f"{self.name!r} is not a label name (letters, digits and _; not __name__)")
        if self.op in ("=~", "!~"):
            try:
                re.compile(self.value)
            except re.error as exc:
                raise InvalidQuery(f"{self.name}{self.op}{self.value!r}: not a regular expression ({exc})") from exc
        return self

    def render(self) -> str:
        return f'{self.name}{self.op}"{escape_label_value(self.value)}"'


def escape_label_value(value: str) -> str:
    """A PromQL string literal's content: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def check_metric_name(name: str) -> str:
    if not METRIC_NAME_RE.match(name):
        raise InvalidQuery(f"{name!r} is not a Prometheus metric name")
    return name


def selector(metrics: Sequence[str], matchers: Iterable[Matcher] = ()) -> str:
    """``{__name__=~"a|b", label="value", ...}``: several metrics in one instant-vector selector."""
    if not metrics:
        raise InvalidQuery("a selector needs at least one metric name")
    # NOTE: metric names hold only [a-zA-Z0-9_:], none of which is special in RE2, so "|" joins them safely.
    names = "|".join(check_metric_name(name) for name in metrics)
    parts = [f'__name__=~"{names}"', *(m.render() for m in matchers)]
    return "{" + ",".join(parts) + "}"


def parse_filters(text: str) -> tuple[Matcher, ...]:
    """``namespace="prod", job=~"vllm.*"`` (quotes optional) -> matchers; raises ``InvalidQuery`` naming the culprit."""
    matchers = []
    for part in _split_outside_quotes(text):
        found = re.match(r'^\s*([^=!~\s]+)\s*(=~|!~|!=|=)\s*(.*?)\s*$', part)
        if not found:
            raise InvalidQuery(f"filter {part.strip()!r}: write label=value, label!=value, label=~regex or "
                               "label!~regex")
        name, op, raw = found.groups()
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            raw = raw[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        matchers.append(Matcher(name=name, op=cast(Operator, op), value=raw))
    return tuple(matchers)


def _split_outside_quotes(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if char == "," and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
    parts.append("".join(current))
    return [part for part in parts if part.strip()]


def duration(seconds: float) -> str:
    """A PromQL duration: 90 -> ``1m30s``, 7200 -> ``2h``; whole seconds, at least 1 s."""
    remaining = max(MIN_STEP_S, math.ceil(seconds))
    text = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, remaining = divmod(remaining, size)
        if count:
            text += f"{count}{unit}"
    return text


class TimeRange(BaseModel):
    """A bounded range for ``query_range``: at most ``MAX_RANGE_S`` long and ``MAX_POINTS`` steps."""

    model_config = ConfigDict(frozen=True)
    start_s: float
    end_s: float
    step_s: int

    @model_validator(mode="after")
    def _bounded(self) -> TimeRange:
        if self.end_s <= self.start_s:
            raise InvalidQuery("the time range must end after it starts")
        if self.end_s - self.start_s > MAX_RANGE_S:
            raise InvalidQuery(f"the time range may span at most {MAX_RANGE_S // 86400} days")
        if self.step_s < MIN_STEP_S:
            raise InvalidQuery(f"the step must be at least {MIN_STEP_S} s")
        if self.points > MAX_POINTS:
            raise InvalidQuery(f"{self.points:,} points per series is more than {MAX_POINTS:,}: use a longer step")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @computed_field  # type: ignore[prop-decorator]
    @property
    def points(self) -> int:
        return math.floor(self.duration_s / self.step_s) + 1


def time_range(end_s: float, duration_s: float, max_points: int = MAX_POINTS) -> TimeRange:
    """The range of ``duration_s`` ending at ``end_s``, with the finest step that stays within ``max_points``."""
    if duration_s <= 0 or duration_s > MAX_RANGE_S:
        raise InvalidQuery(f"the time range must be between 1 s and {MAX_RANGE_S // 86400} days")
    step = max(MIN_STEP_S, math.ceil(duration_s / (min(max_points, MAX_POINTS) - 1)))
    return TimeRange(start_s=end_s - duration_s, end_s=end_s, step_s=step)


def instant_query(matchers: Iterable[Matcher] = ()) -> str:
    """Every series the fleet view reads at one instant (the range's start and end)."""
    return selector(INSTANT_METRICS, matchers)


def range_query(matchers: Iterable[Matcher] = ()) -> str:
    """Running, waiting and KV usage over the range, the raw series (names kept, so one query serves all three)."""
    return selector(RANGE_METRICS, matchers)


def series_match(matchers: Iterable[Matcher] = ()) -> str:
    """The ``match[]`` for ``/api/v1/series``: one series per engine, to list replicas and their labels."""
    return selector((SERIES_METRIC,), matchers)


# Latency histograms by the field names of metrics.py; inter-token latency falls back to its pre-0.11 name.
LATENCY_METRICS: dict[str, tuple[str, ...]] = {
    "queue_s": ("vllm:request_queue_time_seconds",), "ttft_s": ("vllm:time_to_first_token_seconds",),
    "itl_s": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "prefill_s": ("vllm:request_prefill_time_seconds",), "decode_s": ("vllm:request_decode_time_seconds",),
    "e2e_s": ("vllm:e2e_request_latency_seconds",),
}
# One replica: the labels fleet.py keys replicas by, and the served model.
LATENCY_BY = ("job", "instance", "engine", "model_name")


def latency_quantile_query(field: str, quantile: float, window_s: float, matchers: Iterable[Matcher] = ()) -> str:
    """The ``quantile`` of one latency per replica over the last ``window_s``, by PromQL's histogram_quantile:

        histogram_quantile(0.95, (sum by (job, instance, engine, model_name, le)
                                  (increase({__name__=~"vllm:time_to_first_token_seconds_bucket"}[15m]))))

    For inter-token latency the older histogram counts only where a replica lacks the newer one (``or``)."""
    if field not in LATENCY_METRICS:
        raise InvalidQuery(f"{field!r} is not a latency the fleet view reads")
    if not 0 <= quantile <= 1:
        raise InvalidQuery(f"a quantile is between 0 and 1, not {quantile:g}")
    matchers = tuple(matchers)
    by = ", ".join((*LATENCY_BY, "le"))
    parts = [f"(sum by ({by}) (increase({selector((f'{name}_bucket',), matchers)}[{duration(window_s)}])))"
             for name in LATENCY_METRICS[field]]
    return f"histogram_quantile({quantile:g}, {' or '.join(parts)})"
