"""A ``vllm bench serve`` result (the printed "Serving Benchmark Result" block or its ``--save-result`` JSON) against
the speed model's prediction for the same run, and the efficiencies that make the prediction meet the measurement
(the ``mbu`` / ``mfu`` link fields of the speed section).

Pure text handling and arithmetic; the block's labels are those of ``vllm/benchmarks/serve.py`` (0.32.0).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..engine.estimate import Estimate, estimate
from ..errors import CalculatorError, InvalidInput
from ..model.model_source import load_model_spec
from ..scenario import Scenario
from ..serve_command import import_serve_command
from ..limits import field_bounds
from ..speed.calibration import constants_for
from ..speed.inputs import MIN_EFFICIENCY, SpeedInputs
from ..speed.predict import SpeedEstimate, speed_estimate
from ..speed.traffic import Traffic
from .startup_log import MAX_LOG_BYTES, MAX_LINE_CHARS, LogUnreadable

BENCH_MARKERS = ("Serving Benchmark Result", '"mean_tpot_ms"')
_LABELS = {  # printed label -> the --save-result key
    "Successful requests:": "completed", "Failed requests:": "failed",
    "Maximum request concurrency:": "max_concurrency", "Request rate configured (RPS):": "request_rate",
    "Benchmark duration (s):": "duration", "Total input tokens:": "total_input_tokens",
    "Total generated tokens:": "total_output_tokens", "Request throughput (req/s):": "request_throughput",
    "Output token throughput (tok/s):": "output_throughput",
    "Total token throughput (tok/s):": "total_token_throughput",
    "Mean TTFT (ms):": "mean_ttft_ms", "Median TTFT (ms):": "median_ttft_ms", "P99 TTFT (ms):": "p99_ttft_ms",
    "Mean TPOT (ms):": "mean_tpot_ms", "Median TPOT (ms):": "median_tpot_ms", "P99 TPOT (ms):": "p99_tpot_ms",
    "Mean ITL (ms):": "mean_itl_ms", "Median ITL (ms):": "median_itl_ms", "P99 ITL (ms):": "p99_itl_ms",
    "Mean E2EL (ms):": "mean_e2el_ms",
}
_ROW = re.compile(r"^\s{0,8}([A-Za-z0-9 ()/.:\-]{3,60}:)\s{1,60}(-?\d{1,15}(?:\.\d{1,9})?|inf)\s{0,40}$")
_BENCH_FLAG = re.compile(r"--(model|max-concurrency|request-rate|num-prompts)[ =](\S{1,500})")
_BISECTION_STEPS = 40


class BenchResult(BaseModel):
    """The figures of one run, under ``--save-result``'s key names (``None``: not in the paste)."""

    model_config = ConfigDict(frozen=True)
    figures: dict[str, float]
    model: str | None  # model_id (JSON) or the bench command's --model
    max_concurrency: int | None
    request_rate: float | None  # None: all at once (inf)

    @property
    def input_tokens(self) -> int:
        return max(1, round(self.figures["total_input_tokens"] / self.figures["completed"]))

    @property
    def output_tokens(self) -> int:
        return max(1, round(self.figures["total_output_tokens"] / self.figures["completed"]))


def read_bench_result(text: str) -> BenchResult:
    """The printed result block or the saved JSON; ``LogUnreadable`` with one sentence otherwise."""
    if len(text) > MAX_LOG_BYTES:
        raise LogUnreadable(f"the paste is {len(text) / 1e6:,.1f} MB; a benchmark result is a few KB")
    stripped = text.strip()
    if stripped.startswith("{"):
        return _from_json(stripped)
    figures: dict[str, float] = {}
    flags: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw[:MAX_LINE_CHARS]
        for flag, value in _BENCH_FLAG.findall(line) if "bench" in line else ():
            flags.setdefault(flag, value.strip("'\""))
        if match := _ROW.match(line):
            key = _LABELS.get(match[1].strip())
            if key and match[2] != "inf":
                figures.setdefault(key, float(match[2]))
    _require(figures)
    concurrency = figures.get("max_concurrency") or _number(flags.get("max-concurrency"))
    rate = figures.get("request_rate") or _number(flags.get("request-rate"))
    return BenchResult(figures=figures, model=flags.get("model"),
                       max_concurrency=int(concurrency) if concurrency else None, request_rate=rate)


def _from_json(text: str) -> BenchResult:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise LogUnreadable(f"the paste starts like JSON but is not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise LogUnreadable("the JSON is not a `vllm bench serve --save-result` object")
    figures = {key: float(value) for key, value in data.items() if key in _LABELS.values()
               and isinstance(value, (int, float)) and not isinstance(value, bool)}
    _require(figures)
    rate = data.get("request_rate")
    rate = float(rate) if isinstance(rate, (int, float)) and rate not in (float("inf"),) else None
    concurrency = data.get("max_concurrency")
    return BenchResult(figures=figures, model=str(data["model_id"]) if data.get("model_id") else None,
                       max_concurrency=int(concurrency) if isinstance(concurrency, int) else None, request_rate=rate)


def _require(figures: dict[str, float]) -> None:
    needed = ("completed", "total_input_tokens", "total_output_tokens", "mean_ttft_ms", "mean_tpot_ms")
    absent = [key for key in needed if key not in figures]
    if absent:
        raise LogUnreadable(f"not a `vllm bench serve` result: {', '.join(absent)} missing (paste the whole "
                            "\"Serving Benchmark Result\" block, or the --save-result JSON)")
    if figures["completed"] < 1:
        raise LogUnreadable("the benchmark completed no request: there is nothing to compare")


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and value != float("inf") else None


class BenchDiagnosis(BaseModel):
    """Measured vs predicted for one run, and the efficiencies that make the speed model meet it."""

    model_config = ConfigDict(frozen=True)
    bench: BenchResult
    scenario: Scenario
    traffic: Traffic
    rows: tuple[tuple[str, float, float], ...]  # (figure, measured, predicted)
    measured: SpeedInputs  # bandwidth_efficiency / compute_efficiency solved from TPOT / TTFT
    fitted: tuple[float, float]  # the fitted (mbu, mfu) of the platform
    notes: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {"settings": self.scenario.model_dump(exclude_defaults=True), "traffic": self.traffic.model_dump(),
                "measured": {name: value for name, value, _ in self.rows},
                "predicted": {name: round(value, 3) for name, _, value in self.rows},
                "calibration": {"mbu": self.measured.bandwidth_efficiency, "mfu": self.measured.compute_efficiency,
                                "fitted_mbu": self.fitted[0], "fitted_mfu": self.fitted[1]},
                "notes": list(self.notes)}

    def render(self) -> str:
        lines = [f"{self.scenario.model} on {self.scenario.gpu}, {self.traffic.input_tokens:,} in / "
                 f"{self.traffic.output_tokens:,} out tokens per request",
                 f"{'figure':32} {'measured':>12} {'predicted':>12}"]
        lines += [f"{name:32} {measured:>12,.2f} {predicted:>12,.2f}" for name, measured, predicted in self.rows]
        lines.append(f"measured efficiencies: mbu {self.measured.bandwidth_efficiency:.3f} (fitted "
                     f"{self.fitted[0]:.3f}), mfu {self.measured.compute_efficiency:.3f} (fitted {self.fitted[1]:.3f})")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def diagnose_bench(text: str, *, gpu: str | None, model: str | None = None,
                   vllm_version: str | None = None) -> BenchDiagnosis:
    """Compare a pasted benchmark result with the speed model for the same run (a ``vllm serve`` line in the paste
    gives the deployment's settings)."""
    bench = read_bench_result(text)
    scenario = _scenario(text, bench, gpu=gpu, model=model, vllm_version=vllm_version)
    result = estimate(scenario, load_model_spec(scenario.model))
    if not result.on_gpu:
        raise InvalidInput("the speed model covers GPUs; give the GPU the benchmark ran on (--gpu)")
    everyone = {"concurrency": int(bench.figures["completed"])}
    load = ({"concurrency": bench.max_concurrency} if bench.max_concurrency
            else {"request_rate": bench.request_rate} if bench.request_rate else everyone)
    traffic = Traffic(input_tokens=bench.input_tokens, output_tokens=bench.output_tokens, **load)
    notes = [] if bench.max_concurrency or bench.request_rate else [
        "no --max-concurrency or --request-rate: every request was sent at once, modelled as that many in flight"]
    fitted = constants_for(result.gpu.platform)
    predicted = speed_estimate(result, traffic)
    mbu = _solve(result, traffic, "bandwidth_efficiency", bench.figures["mean_tpot_ms"], lambda s: s.tpot_ms, {})
    mfu = _solve(result, traffic, "compute_efficiency", bench.figures["mean_ttft_ms"], lambda s: s.ttft_ms,
                 {"bandwidth_efficiency": mbu})
    for name, value in (("mbu", mbu), ("mfu", mfu)):
        if value >= 1.0:
            notes.append(f"{name}: the run was faster than the model allows even at 100 % efficiency; capped at 1")
    return BenchDiagnosis(bench=bench, scenario=scenario, traffic=traffic, rows=_rows(bench, predicted),
                          measured=SpeedInputs(bandwidth_efficiency=round(mbu, 4), compute_efficiency=round(mfu, 4)),
                          fitted=(fitted.bandwidth_efficiency, fitted.compute_efficiency), notes=tuple(notes))


def _scenario(text: str, bench: BenchResult, *, gpu: str | None, model: str | None,
              vllm_version: str | None) -> Scenario:
    if gpu is None:
        raise InvalidInput("a benchmark result does not say which GPU ran it: give the GPU (--gpu)")
    fields: dict[str, Any] = {}
    serve = next((line for line in text.splitlines()[:200] if re.search(r"\bvllm\s+serve\b|api_server", line[:2000])
                  and "bench" not in line), None)
    if serve:
        try:
            imported, _ = import_serve_command(serve[:MAX_LINE_CHARS])
            fields = imported.model_dump(exclude_defaults=True)
        except CalculatorError:
            fields = {}
    fields.update({key: value for key, value in (("model", model or fields.get("model") or bench.model),
                                                 ("vllm_version", vllm_version)) if value})
    if not fields.get("model"):
        raise InvalidInput("the result does not name the model: give it (--model)")
    fields.update(gpu=gpu, gpu_memory_gib=None)
    return Scenario(**fields)


def _solve(result: Estimate, traffic: Traffic, field: str, measured_ms: float,
           figure: Callable[[SpeedEstimate], float], fixed: dict[str, float]) -> float:
    """The efficiency at which the predicted figure equals the measured one (bisection; faster with more)."""
    base = constants_for(result.gpu.platform).model_copy(update=fixed)
    # NOTE: the most the measured figure may say is what the Plan page's link accepts (SpeedInputs)
    low, high = MIN_EFFICIENCY, field_bounds(SpeedInputs, field)[1]

    def at(value: float) -> float:
        return figure(speed_estimate(result, traffic, constants=base.model_copy(update={field: value})))

    if at(high) >= measured_ms:
        return high
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2
        if at(middle) > measured_ms:
            low = middle
        else:
            high = middle
    return high


def _rows(bench: BenchResult, predicted: SpeedEstimate) -> tuple[tuple[str, float, float], ...]:
    pairs = (("mean_ttft_ms", predicted.ttft_ms), ("p99_ttft_ms", None), ("mean_tpot_ms", predicted.tpot_ms),
             ("mean_itl_ms", predicted.tpot_ms), ("output_throughput", predicted.output_throughput_tok_s),
             ("request_throughput", predicted.request_throughput),
             ("total_token_throughput", predicted.total_throughput_tok_s))
    return tuple((key, bench.figures[key], value) for key, value in pairs
                 if key in bench.figures and value is not None)
