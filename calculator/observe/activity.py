"""What happened between two reads of one engine (pure), from counters and histograms that see every request.

Gauges (running, waiting, KV usage) show an instant: a burst that starts and ends between two refreshes leaves
them flat. vLLM's counters (``request_success_total``, prompt and generation tokens, preemptions) and histograms
(end-to-end latency, queue time, time to first token) count every request, so their increases over the interval
say exactly how many requests finished and how many tokens they moved, and bound how many were in the server at
once (Little's law: the requests' time in the server, summed, divided by the window they lived in).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from .metrics import EngineMetrics, Histogram

_COUNTED = ("requests_finished_total", "prompt_tokens_total", "generation_tokens_total", "preemptions_total")


class IntervalActivity(BaseModel):
    """Increases between two reads ``interval_s`` apart; None where the server does not expose the counter."""

    model_config = ConfigDict(frozen=True)
    interval_s: float
    restarted: bool  # a counter went down: the server restarted, the interval says nothing
    requests_finished: int | None = None
    finished_by_reason: dict[str, int] = {}
    prompt_tokens: int | None = None
    generation_tokens: int | None = None
    preemptions: int | None = None
    mean_e2e_s: float | None = None
    mean_queue_s: float | None = None
    mean_ttft_s: float | None = None
    peak_requests_at_least: int | None = None  # in the server (running + waiting) at one moment
    idle_before: bool = False  # nothing running or waiting at the earlier read

    @property
    def busy(self) -> bool:
        return bool(self.requests_finished or self.prompt_tokens or self.generation_tokens or self.preemptions)


def _increase(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def histogram_increase(before: Histogram | None, after: Histogram | None) -> Histogram | None:
    """The requests counted between two reads (None when either is missing or the server restarted)."""
    if before is None or after is None or after.count < before.count:
        return None
    earlier = dict(before.buckets)
    return Histogram(buckets=tuple((le, count - earlier.get(le, 0.0)) for le, count in after.buckets),
                     sum=after.sum - before.sum, count=after.count - before.count)


def _longest_s(histogram: Histogram) -> float | None:
    """The smallest bucket bound that every counted value lies under (None when some fell in +Inf)."""
    for upper, cumulative in histogram.buckets:
        if cumulative >= histogram.count:
            return None if math.isinf(upper) else upper
    return None


def peak_in_server(e2e: Histogram | None, interval_s: float, idle_before: bool,
                   seen: tuple[float, ...] = ()) -> int | None:
    """The fewest requests that must have been in the server at one moment for the finished requests' summed
    time in it: every one of them lived inside the window from (the earlier read, less the longest e2e latency)
    to the later read — or from the earlier read itself when nothing was running or waiting then — and a peak is
    at least the average over any window. ``seen``: requests in the server at the reads themselves."""
    candidates = [math.ceil(n) for n in seen]
    if e2e is not None and e2e.count > 0 and e2e.sum > 0:
        longest = 0.0 if idle_before else _longest_s(e2e)
        if longest is not None and interval_s + longest > 0:
            # NOTE: round away float noise first: 48.0 / 3.0 must stay 16, not become 17.
            candidates.append(math.ceil(round(e2e.sum / (interval_s + longest), 9)))
    return max(candidates) if candidates else None


def interval_activity(previous: EngineMetrics, current: EngineMetrics, interval_s: float) -> IntervalActivity:
    """The engine's activity between two reads."""
    restarted = any(_increase(getattr(previous, n), getattr(current, n)) is not None
                    and getattr(current, n) < getattr(previous, n) for n in _COUNTED)
    if restarted or interval_s <= 0:
        return IntervalActivity(interval_s=interval_s, restarted=restarted)

    def counted(name: str) -> int | None:
        value = _increase(getattr(previous, name), getattr(current, name))
        return None if value is None else round(value)

    reasons = {reason: round(count - previous.finished_by_reason.get(reason, 0.0))
               for reason, count in current.finished_by_reason.items()
               if count - previous.finished_by_reason.get(reason, 0.0) > 0}
    latency = {name: histogram_increase(previous.histograms.get(name), current.histograms.get(name))
               for name in ("e2e_s", "queue_s", "ttft_s")}
    idle_before = previous.running == 0 and previous.waiting == 0
    in_server = tuple((e.running or 0) + (e.waiting or 0) for e in (previous, current)
                      if e.running is not None or e.waiting is not None)
    return IntervalActivity(
        interval_s=interval_s, restarted=False, requests_finished=counted("requests_finished_total"),
        finished_by_reason=reasons, prompt_tokens=counted("prompt_tokens_total"),
        generation_tokens=counted("generation_tokens_total"), preemptions=counted("preemptions_total"),
        mean_e2e_s=_mean(latency["e2e_s"]), mean_queue_s=_mean(latency["queue_s"]),
        mean_ttft_s=_mean(latency["ttft_s"]), idle_before=idle_before,
        peak_requests_at_least=peak_in_server(latency["e2e_s"], interval_s, idle_before, in_server))


def _mean(histogram: Histogram | None) -> float | None:
    return histogram.sum / histogram.count if histogram is not None and histogram.count > 0 else None


def describe(activity: IntervalActivity) -> str:
    """One sentence for the page."""
    if activity.restarted:
        return "A counter went down: the server restarted since the last read, so this interval says nothing."
    if not activity.busy:
        return f"Nothing finished and no tokens were processed in the last {activity.interval_s:.1f} s."
    parts = []
    if activity.requests_finished is not None:
        reasons = ", ".join(f"{n:,} {r}" for r, n in sorted(activity.finished_by_reason.items()))
        parts.append(f"{activity.requests_finished:,} request(s) finished" + (f" ({reasons})" if reasons else ""))
    if activity.prompt_tokens is not None and activity.generation_tokens is not None:
        parts.append(f"{activity.prompt_tokens:,} prompt and {activity.generation_tokens:,} generated tokens")
    if activity.peak_requests_at_least:
        parts.append(f"at least {activity.peak_requests_at_least:,} request(s) in the server at once")
    if activity.preemptions:
        parts.append(f"{activity.preemptions:,} preemption(s)")
    return f"In the last {activity.interval_s:.1f} s: " + "; ".join(parts) + "."
