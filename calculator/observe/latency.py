"""Latency as a vLLM server measures it, and what it says (pure): p50/p95 of its latency histograms per interval
between reads, the speed model's prediction for the same concurrency and lengths, the bandwidth and FLOPs its
own roofline counters say it achieved, and a diagnosis in plain words.

Quantiles interpolate inside the bucket as PromQL's ``histogram_quantile`` does, then are clamped into what the
histogram's own count and sum allow (``quantile.py``), on the increase between two reads: the requests that
finished in that interval, not the server's whole life.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from ..engine.estimate import Estimate
from ..engine.workload import Workload
from ..errors import CalculatorError, InvalidInput
from ..speed.predict import SpeedEstimate, speed_estimate
from ..speed.traffic import Traffic, traffic_from
from .activity import IntervalActivity, histogram_increase
from .live import RESTART_NOTE, pool_knobs, preemptions_rising, queue_held_by_memory
from .metrics import EngineMetrics, Histogram
from .quantile import Quantile

# (histogram field, label): vLLM's request latency histograms, in the order a request lives them.
LATENCY_HISTOGRAMS = (
    ("queue_s", "Queue time"), ("ttft_s", "Time to first token"), ("itl_s", "Inter-token latency"),
    ("prefill_s", "Prefill time"), ("decode_s", "Decode time"), ("e2e_s", "End-to-end latency"),
)
# what a histogram counts where it is not requests (one gap per token after the first)
COUNTED = {"itl_s": "token gaps"}
NEARLY_FULL = 0.95  # KV usage at which preemptions are the cache running out (the per-read advice warns from 0.8)
LOW_USAGE = 0.5
QUEUE_RISING_INTERVALS = 3  # consecutive intervals whose queue-time p50 grows
QUEUE_RISING_MIN_S = 0.1  # a queue under 100 ms is noise, not a trend
SLOW_FRACTION = 0.5  # measured generation below half of what the speed model predicts is "low throughput"


def latency_histogram(engine: EngineMetrics, field: str) -> Histogram | None:
    """A latency histogram; inter-token latency falls back to the older ``time_per_output_token_seconds``."""
    if field == "itl_s":
        return engine.histograms.get("itl_s") or engine.histograms.get("tpot_s")
    return engine.histograms.get(field)


class Percentiles(BaseModel):
    """p50 and p95 of what a histogram counted, each clamped into what its buckets, count and sum allow, its mean
    (seconds), and how many it counted (requests, or token gaps for inter-token latency)."""

    model_config = ConfigDict(frozen=True)
    p50: Quantile
    p95: Quantile
    mean_s: float
    count: int

    @property
    def p50_s(self) -> float:
        return self.p50.value

    @property
    def p95_s(self) -> float:
        return self.p95.value


def percentiles(histogram: Histogram | None) -> Percentiles | None:
    if histogram is None or histogram.count <= 0:
        return None
    p50, p95 = histogram.bounded_quantile(0.5), histogram.bounded_quantile(0.95)
    if p50 is None or p95 is None:
        return None
    return Percentiles(p50=p50, p95=p95, mean_s=histogram.mean, count=round(histogram.count))


def interval_percentiles(previous: EngineMetrics | None, current: EngineMetrics) -> dict[str, Percentiles]:
    """Each latency's p50/p95 over the requests that finished between two reads (or since the server started,
    when there is no earlier read)."""
    out = {}
    for field, _ in LATENCY_HISTOGRAMS:
        after = latency_histogram(current, field)
        counted = after if previous is None else histogram_increase(latency_histogram(previous, field), after)
        shown = percentiles(counted)
        if shown is not None:
            out[field] = shown
    return out


def latency_history(points: Sequence[tuple[float, EngineMetrics]]) -> dict[str, list[tuple[float, Percentiles]]]:
    """Per latency, (time of the later read, percentiles) for every interval in which requests finished."""
    series: dict[str, list[tuple[float, Percentiles]]] = {field: [] for field, _ in LATENCY_HISTOGRAMS}
    for (_, before), (when, after) in zip(points, points[1:], strict=False):
        for field, value in interval_percentiles(before, after).items():
            series[field].append((when, value))
    return series


class Efficiency(BaseModel):
    """What vLLM's roofline counters say one GPU achieved over an interval, against the GPU's datasheet."""

    model_config = ConfigDict(frozen=True)
    interval_s: float
    read_bytes_per_s: float
    flops_per_s: float
    bandwidth_utilisation: float  # of the HBM bandwidth
    flops_utilisation: float  # of the dense peak of the compute path


def efficiency(previous: EngineMetrics, current: EngineMetrics, interval_s: float,
               peak_bytes_s: float, peak_flops: float) -> Efficiency | None:
    """Achieved bandwidth and FLOPs per GPU between two reads; None without the counters, with no work done in
    the interval, or after a restart."""
    pairs = [(getattr(previous, n), getattr(current, n)) for n in ("estimated_read_bytes_total",
                                                                   "estimated_flops_total")]
    if interval_s <= 0 or any(a is None or b is None or b < a for a, b in pairs):
        return None
    read, flops = ((b - a) / interval_s for a, b in pairs)
    if read <= 0 and flops <= 0:
        return None
    return Efficiency(interval_s=interval_s, read_bytes_per_s=read, flops_per_s=flops,
                      bandwidth_utilisation=read / peak_bytes_s, flops_utilisation=flops / peak_flops)


def observed_traffic(workload: Workload, concurrency: float | None) -> Traffic | None:
    """The server's lengths (its length histograms) at the concurrency it ran (None: nothing ran);
    ``InvalidInput`` when the speed model cannot take those lengths."""
    if not concurrency or concurrency < 1 or workload.output_tokens_mean < 1:
        return None
    return traffic_from(workload, concurrency=round(concurrency))



def observed_concurrency(running: float | None, activity: IntervalActivity | None) -> float | None:
    """Requests running at the latest read, or the fewest that were in the server at once since the one before."""
    if running:
        return running
    return activity.peak_requests_at_least if activity is not None else None


class Compared(BaseModel):
    """One quantity the speed model predicts beside what the server measured (None: not measured)."""

    model_config = ConfigDict(frozen=True)
    quantity: str
    predicted: float
    measured: float | None

    @property
    def error_pct(self) -> float | None:
        return None if not self.measured else (self.predicted - self.measured) / self.measured * 100


def prediction_vs_measured(speed: SpeedEstimate, measured: dict[str, Percentiles],
                           generation_tok_s: float | None) -> list[Compared]:
    """The speed model's times (ms) and output tokens/s beside the server's histograms and token counter."""
    def ms(field: str, which: str) -> float | None:
        found = measured.get(field)
        return None if found is None else getattr(found, which) * 1e3

    return [Compared(quantity="TTFT mean", predicted=speed.ttft_ms, measured=ms("ttft_s", "mean_s")),
            Compared(quantity="TTFT p95", predicted=speed.ttft_p95_ms, measured=ms("ttft_s", "p95_s")),
            Compared(quantity="Inter-token latency mean", predicted=speed.tpot_ms, measured=ms("itl_s", "mean_s")),
            Compared(quantity="End-to-end mean", predicted=speed.e2e_ms, measured=ms("e2e_s", "mean_s")),
            Compared(quantity="Queue time mean", predicted=speed.queue_wait_ms, measured=ms("queue_s", "mean_s")),
            Compared(quantity="Output tokens/s", predicted=speed.output_throughput_tok_s, measured=generation_tok_s)]

def predicted(result: Estimate, traffic: Traffic) -> SpeedEstimate:
    """The speed model for a server's deployment; ``InvalidInput`` for a CPU server (the model covers GPUs)."""
    if not result.on_gpu:
        raise InvalidInput("the speed model covers GPUs; this server runs on the CPU, so no speed is predicted "
                           "for it")
    try:
        return speed_estimate(result, traffic)
    except CalculatorError:
        raise
    except ValueError as exc:  # a Traffic the model cannot take
        raise InvalidInput(str(exc).splitlines()[-1]) from exc


def diagnosis(points: Sequence[tuple[float, EngineMetrics]], measured_tok_s: float | None = None,
              predicted_tok_s: float | None = None, on_cpu: bool = False) -> list[str]:
    """What the recent reads say limits the server, in plain words, each with the knobs that help."""
    if not points:
        return []
    engines = [engine for _, engine in points]
    latest = engines[-1]
    usage = max((e.kv_cache_usage or 0.0) for e in engines[-QUEUE_RISING_INTERVALS - 1:])
    preempted = preemptions_rising(points)
    notes = []
    if usage >= NEARLY_FULL and preempted:
        knobs = pool_knobs(latest, on_cpu)
        more = "add replicas" if on_cpu else "add GPUs (tensor parallel or replicas)"
        notes.append(f"Memory is the bottleneck: the KV cache reached {usage:.0%} and requests are being "
                     f"preempted. {knobs[0].upper()}{knobs[1:]}; or {more}.")
    slow = (measured_tok_s is not None and predicted_tok_s is not None and measured_tok_s > 0
            and measured_tok_s < SLOW_FRACTION * predicted_tok_s)
    held = queue_held_by_memory(latest, on_cpu) if (latest.waiting or 0) > 0 else None
    if usage < LOW_USAGE and held:
        notes.append(f"Memory is the bottleneck although the KV cache reads only {usage:.0%}: {held}.")
    elif usage < LOW_USAGE and ((latest.waiting or 0) > 0 or slow):
        why = (f"{latest.waiting:.0f} request(s) wait" if (latest.waiting or 0) > 0 else
               f"it generates {measured_tok_s:,.0f} tok/s where the speed model expects {predicted_tok_s:,.0f}")
        notes.append(f"Compute or scheduling limits the server: the KV cache is only {usage:.0%} full yet {why}. "
                     "Raise --max-num-batched-tokens or --max-num-seqs, or use tensor parallelism.")
    queue = [p.p50_s for _, p in latency_history(points)["queue_s"]][-QUEUE_RISING_INTERVALS:]
    if (len(queue) == QUEUE_RISING_INTERVALS and all(b > a for a, b in zip(queue, queue[1:], strict=False))
            and queue[-1] >= QUEUE_RISING_MIN_S):
        notes.append(f"Queue time is rising ({' → '.join(f'{q * 1e3:,.0f} ms' for q in queue)} at p50): the load "
                     "outgrows this server. Add replicas.")
    return notes


def notes_to_show(diagnosed: Sequence[str], advice: Sequence[str]) -> list[tuple[str, bool]]:
    """(note, from the diagnosis) in the order shown: the recent reads' diagnosis when it has one (the latest
    read's advice names the same knobs and would repeat them), else that advice; a restart is always said."""
    if not diagnosed:
        return [(note, False) for note in advice]
    return [*((note, True) for note in diagnosed), *((note, False) for note in advice if note == RESTART_NOTE)]
