"""Read a pasted vLLM server log: the settings it ran with, every memory figure it printed, how the start-up ended.

Pure text handling, line by line with bounded patterns: V0 and V1 logs of any version we model, with or without the
``(EngineCore_DP0 pid=...)`` / ``(Worker_TP3_EP3 pid=...)`` prefixes, timestamps and log levels, ``non-default args:
{...}``, the engine's ``Initializing ... engine (vX) with config: ...`` line, and a ``vllm serve`` / ``docker run``
line at the top (read by the launch-line importer). The exact texts are those of
``shared/research/vllm-memory-internals.md`` and the records of ``shared/data/vllm-startup-logs/``.

What the log does not say (usually which GPU) is listed in ``StartupLog.missing``, never guessed. A paste that is
not one vLLM start-up (too large, binary, another program's log, two servers interleaved) raises ``LogUnreadable``
with one sentence.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..engine.vllm_versions import VllmVersion
from ..errors import CalculatorError
from ..serve_command import DTYPE_NAMES, import_serve_command

MAX_LOG_BYTES = 5_000_000  # a start-up log is a few hundred KB; a whole day of request logs is not one
MAX_LINE_CHARS = 20_000  # the engine config line is ~3,000 characters; longer lines are cut, never searched whole
_NUMBER = r"(-?\d{1,9}(?:\.\d{1,9})?)"
_INT = r"(\d{1,3}(?:,\d{3}){0,6}|\d{1,15})"
_ANSI = re.compile(r"\x1b\[[0-9;]{0,20}[A-Za-z]")
# "(EngineCore_DP0 pid=107) ", "(Worker_TP3_EP3 pid=9) ", "(APIServer pid=1) ", "[rank0]: "
_PREFIX = re.compile(r"^\s{0,40}(?:\((?P<role>[A-Za-z][A-Za-z0-9_]{0,40})(?: pid=(?P<pid>\d{1,9}))?\)|"
                     r"\[(?P<rank>rank\d{1,5})\]:)")
# A command that starts vLLM, as the launch-line importer reads it: env assignments, sudo/env/nohup, then vllm,
# python -m vllm..., or a container run.
_LAUNCH = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]{0,60}=\S{0,200}\s+|(?:sudo|env|nohup|time|exec)\s+){0,12}"
                     r"(?:\S{0,200}/)?"
                     r"(?:vllm\s+serve\b|python[\d.]{0,5}\s+-m\s+vllm|(?:docker|podman|nerdctl)\s+run\b)")
_LOG_HEAD = re.compile(r"\b(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\s{1,4}\d\d-\d\d \d\d:\d\d:\d\d")


class LogUnreadable(CalculatorError):
    """The paste is not one vLLM start-up log this reader can read."""


class PrintedFigures(BaseModel):
    """Every memory and capacity figure vLLM printed, per GPU/rank as vLLM prints them (``None``: not printed).

    Where several ranks print a figure, the busiest rank's is kept: the largest weights, activation and non-torch
    memory, the smallest KV cache memory (the engine's capacity is the smallest rank's).
    """

    model_config = ConfigDict(frozen=True)
    weights_gib: float | None = None  # "Model loading took X GiB" (V0 "GB" labels are GiB)
    activation_peak_gib: float | None = None
    non_torch_memory_gib: float | None = None
    consumed_memory_gib: float | None = None  # 0.27+: "X GiB for consumed memory (weights + non-torch)"
    cudagraph_gib: float | None = None  # "for CUDAGraph memory" / "Graph capturing finished ..., took X GiB"
    cudagraph_estimate_gib: float | None = None  # "CUDA graph pool memory: A (actual), E GiB (estimated)"
    available_kv_cache_gib: float | None = None
    num_gpu_blocks: int | None = None
    num_cpu_blocks: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens_per_request: int | None = None
    total_memory_gib: float | None = None  # "Free memory on device (free/total GiB)" / "total_gpu_memory (X GiB)"
    free_memory_at_startup_gib: float | None = None
    requested_memory_gib: float | None = None  # util x total
    kv_cache_needed_gib: float | None = None  # the one-request check's figures
    estimated_max_model_len: int | None = None

    def present(self) -> dict[str, float | int]:
        return {key: value for key, value in self.model_dump().items() if value is not None}


class Outcome(BaseModel):
    """How the start-up ended: ``started``, ``failed`` (with the error and the check that raised it) or ``unknown``
    (the log stops before either)."""

    model_config = ConfigDict(frozen=True)
    status: Literal["started", "failed", "unknown"]
    error: str | None = None  # the error line, without its prefix
    check: str | None = None  # which check raised it, in words
    kind: Literal["cuda_oom", "no_kv_memory", "max_len", "free_memory", "length_limit", "other"] | None = None

    def __str__(self) -> str:
        if self.status != "failed":
            return self.status
        return f"failed: {self.error}"


class StartupLog(BaseModel):
    """What one start-up log says."""

    model_config = ConfigDict(frozen=True)
    engine: Literal["v0", "v1"] | None
    vllm_version: str | None
    device: Literal["cuda", "rocm", "cpu"] | None  # from the log's own words ("CPU KV cache size", "# rocm blocks")
    settings: dict[str, Any]  # Scenario field -> value, only what the log states
    sources: dict[str, str]  # Scenario field -> where the value was read ("non-default args", "engine config", ...)
    printed: PrintedFigures
    outcome: Outcome
    missing: tuple[str, ...]  # what the log does not say and the caller must give ("gpu")
    notes: tuple[str, ...]
    lines_read: int


def read_startup_log(text: str | bytes) -> StartupLog:
    """Read a pasted log; ``LogUnreadable`` with one sentence when it is not one vLLM start-up."""
    text = _as_text(text)
    reader = _Reader()
    for raw in text.splitlines():
        reader.feed(raw[:MAX_LINE_CHARS])
    return reader.result()


def _as_text(text: str | bytes) -> str:
    size = len(text)
    if size > MAX_LOG_BYTES:
        raise LogUnreadable(f"the paste is {size / 1e6:,.1f} MB; a start-up log is read up to "
                            f"{MAX_LOG_BYTES / 1e6:,.0f} MB: paste the lines from the launch to the first request "
                            "(or to the error)")
    if isinstance(text, bytes):
        if b"\x00" in text[:65536]:
            raise LogUnreadable("this is a binary file, not a vLLM log: paste the server's text output")
        text = text.decode("utf-8", errors="replace")
    sample = text[:65536]
    if "\x00" in sample or (sample and sum(not (c.isprintable() or c in "\r\n\t\x1b") for c in sample)
                            > 0.1 * len(sample)):
        raise LogUnreadable("this is binary data, not a vLLM log: paste the server's text output")
    return text


# Memory-profiling lines, every era (the research note §1.2-§1.6 and the records' quotes).
_WEIGHTS = re.compile(r"(?:Model loading took|Loading model weights took|Loading weights took):?\s{0,3}"
                      + _NUMBER + r"\s{0,2}(GiB|GB)")
_V0_BUDGET = re.compile(r"total_gpu_memory \(" + _NUMBER + r"\s?GiB\) x gpu_memory_utilization \(" + _NUMBER
                        + r"\) = " + _NUMBER + r"\s?GiB")
_V0_TERMS = re.compile(r"model weights take " + _NUMBER + r"\s?GiB; non_torch_memory takes " + _NUMBER
                       + r"\s?GiB; PyTorch activation peak memory takes " + _NUMBER
                       + r"\s?GiB; the rest of the memory reserved for KV Cache is " + _NUMBER + r"\s?GiB")
_V0_PROFILE = re.compile(r"Memory profiling results:.{0,40}total_gpu_memory=" + _NUMBER + r"GiB.{0,200}?"
                         r"peak_torch_memory=" + _NUMBER + r"GiB.{0,200}?non_torch_memory=" + _NUMBER
                         + r"GiB kv_cache_size=" + _NUMBER + r"GiB gpu_memory_utilization=" + _NUMBER)
_FREE_ON_DEVICE = re.compile(r"Free memory on device(?: \w{1,20})? \(" + _NUMBER + "/" + _NUMBER
                             + r" GiB\) on startup")
_DESIRED = re.compile(r"Desired GPU memory utilization is \(" + _NUMBER + ", " + _NUMBER + r" GiB\)")
_ACTUAL_SPLIT = re.compile(r"Actual usage is " + _NUMBER + r" GiB for weight, " + _NUMBER
                           + r" GiB for peak activation, " + _NUMBER + r" GiB for non-torch memory, and " + _NUMBER
                           + r" GiB for CUDAGraph memory")
_ACTUAL_CONSUMED = re.compile(r"Actual usage is " + _NUMBER + r" GiB for consumed memory \(weights \+ non-torch\), "
                              + _NUMBER + r" GiB for peak activation, and " + _NUMBER + r" GiB for CUDAGraph memory")
_AVAILABLE_KV = re.compile(r"Available KV cache memory:?\s{0,3}" + _NUMBER + r"\s?GiB")
_KV_IN_USE = re.compile(r"Current kv cache memory in use is " + _NUMBER + r" GiB")
_EXPLICIT_KV = re.compile(r"Explicitly set \(" + _NUMBER + "/" + _NUMBER + r"\) GiB for KV cache")
_RESERVED_KV = re.compile(r"reserved " + _NUMBER + r" GiB memory for KV Cache as specified by kv_cache_memory_bytes")
_GRAPH_POOL = re.compile(r"CUDA graph pool memory: " + _NUMBER + r" GiB \(actual\), " + _NUMBER
                         + r" GiB \(estimated\)")
_GRAPH_TOOK = re.compile(r"Graph capturing finished in \d{1,6} secs?, took " + _NUMBER + " GiB")
_BLOCKS = re.compile(r"# (GPU|CUDA|cuda|rocm|ROCM|CPU|cpu|xpu|hpu|npu|tpu) blocks: (\d{1,12})"
                     r"(?:, # CPU blocks: (\d{1,12}))?")
_BLOCKS_OVERRIDE = re.compile(r"Overriding num_gpu_blocks=(\d{1,12}) with num_gpu_blocks_override=(\d{1,12})")
_KV_TOKENS = re.compile(r"\b(GPU|CPU|XPU|TPU|HPU|NPU)(?: \+ host)? KV cache size: " + _INT + " tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for " + _INT + r" tokens per request: " + _NUMBER + "x")
# Settings lines.
_API_VERSION = re.compile(r"vLLM (?:API )?server version v?(\d{1,4}\.\d{1,4}[0-9A-Za-z.+\-]{0,60})")
# The model the API server names: "vLLM server version X, serving model M" (0.28+ without the logo) or the logo's
# "model   M" line.
_SERVED_MODEL = re.compile(r"(?:, serving model |\u2588\s{1,4}model\s{1,8})(\S{1,500})")
_BANNER_VERSION = re.compile(r"\u2588.{0,40}\bversion v?(\d{1,4}\.\d{1,4}[0-9A-Za-z.+\-]{0,60})")  # 0.11+ banner
_ENGINE_CONFIG = re.compile(r"Initializing an? (?:(V0|V1) )?LLM engine \(v?([0-9A-Za-z.+\-]{1,60})\)"
                            r"(?: with config: )?")
_NON_DEFAULT = re.compile(r"non-default args: \{")
_USING_LEN = re.compile(r"Using max model len (\d{1,12})")
_CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d{1,12})")
# Outcomes.
_STARTED = ("Application startup complete", "Starting vLLM API server", "Uvicorn running on",
            "Available routes are")
_OOM = re.compile(r"(?:torch\.(?:cuda\.)?OutOfMemoryError|OutOfMemoryError|HIP out of memory|CUDA out of memory"
                  r"|CUDA error: out of memory)")
_NO_KV_MEMORY = "No available memory for the cache blocks"
_V0_MAX_LEN = re.compile(r"The model's max seq len \((\d{1,12})\) is larger than the maximum number of tokens that "
                         r"can be stored in KV cache \((\d{1,15})\)")
_V1_MAX_LEN = re.compile(r"To serve at least one request with the models?'s? max seq len \((\d{1,12})\), \("
                         + _NUMBER + r" GiB KV cache is needed, which is larger than the available KV cache memory \("
                         + _NUMBER + r" GiB\)\.(?: Based on the available memory, the estimated maximum model length "
                                     r"is (-?\d{1,12})\.)?")
_FREE_TOO_LOW = re.compile(r"Free memory on device.{0,40}on startup is less than desired GPU memory utilization")
_LENGTH_LIMIT = re.compile(r"User-specified max_model_len \((\d{1,12})\) is greater than the derived max_model_len")
_ERROR_LINE = re.compile(r"\b([A-Z][A-Za-z]{2,40}(?:Error|Exception)): (.{1,2000})")

_CHECKS = {
    "cuda_oom": "a CUDA allocation failed (the GPU ran out of memory)",
    "no_kv_memory": "the KV-cache budget check (util × total − weights − activation − non-torch ≤ 0)",
    "max_len": "the one-request check (one max_model_len request must fit in the KV cache)",
    "free_memory": "the start-up free-memory check (free memory < gpu_memory_utilization × total)",
    "length_limit": "the max_model_len check against the model's own context length",
    "other": "an error vLLM raised during start-up",
}


# EngineArgs names that are Scenario fields too (vLLM prints them in "non-default args").
_NON_DEFAULT_FIELDS = ("model", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "max_model_len",
                       "gpu_memory_utilization", "dtype", "quantization", "kv_cache_dtype", "block_size",
                       "enforce_eager", "max_num_seqs", "max_num_batched_tokens", "enable_expert_parallel",
                       "kv_cache_memory_bytes", "cpu_offload_gb", "num_gpu_blocks_override", "enable_prefix_caching",
                       "enable_chunked_prefill")


class _Reader:
    def __init__(self) -> None:
        self.figures: dict[str, float | int] = {}
        self.settings: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.notes: list[str] = []
        self.versions: set[str] = set()
        self.engine: str | None = None
        self.device: str | None = None
        self.vllm_lines = 0
        self.lines = 0
        self.started = False
        self.failure: tuple[str, str] | None = None  # (kind, error text)
        self.first_error: str | None = None
        self.engine_starts: dict[str, set[str]] = {}  # role -> pids printing the engine config line
        self.api_starts: set[str] = set()
        self.launch_checked = False

    # -- one line ---------------------------------------------------------------------------------------------
    def feed(self, raw: str) -> None:
        self.lines += 1
        line = _ANSI.sub("", raw)
        prefix = _PREFIX.match(line)
        role = (prefix["role"] or prefix["rank"] or "") if prefix else ""
        pid = (prefix["pid"] or "") if prefix else ""
        if not self.launch_checked and self.vllm_lines == 0 and not _LOG_HEAD.search(line):
            self._launch_line(line)
        if _LOG_HEAD.search(line) or prefix:
            self.vllm_lines += 1
        self._settings(line, role, pid)
        self._memory(line)
        self._outcome(line)

    def _launch_line(self, line: str) -> None:
        stripped = line.strip().lstrip("$# ").strip()
        if not _LAUNCH.match(stripped[:2000]):
            return
        self.launch_checked = True
        try:
            scenario, report = import_serve_command(stripped)
        except CalculatorError as exc:
            self.notes.append(f"the launch line at the top could not be read: {exc}")
            return
        # NOTE: only what the line sets: the importer fills the rest with defaults and the GPU with a placeholder.
        for field, value in scenario.model_dump(exclude_defaults=True).items():
            self._set(field, value, "launch line")
        if report.incomplete:
            self.notes.extend(f"launch line: {item}" for item in report.incomplete)

    def _settings(self, line: str, role: str, pid: str) -> None:
        if match := _API_VERSION.search(line) or _BANNER_VERSION.search(line):
            self.versions.add(_release(match[1]))
            # NOTE: keyed by process: one server prints its version once per process, with or without a prefix.
            self.api_starts.add(pid)
        if match := _SERVED_MODEL.search(line):
            self._set("model", match[1], "the version banner", keep=True)
        if match := _ENGINE_CONFIG.search(line):
            self.versions.add(_release(match[2]))
            if match[1]:
                self.engine = match[1].lower()
            self.engine_starts.setdefault(role or "engine", set()).add(pid)
            self._engine_config(line[match.end():])
        if match := _NON_DEFAULT.search(line):
            self._non_default(line[match.end():])
        if match := _USING_LEN.search(line):
            self._set("max_model_len", int(match[1]), "\"Using max model len\"", keep=True)
        if match := _CHUNKED.search(line):
            self._set("max_num_batched_tokens", int(match[1]), "\"Chunked prefill is enabled\"", keep=True)

    def _engine_config(self, rest: str) -> None:
        source = "engine config line"
        patterns = {
            "model": r"\bmodel='([^']{1,500})'", "dtype": r"\bdtype=torch\.(\w{1,20})",
            "max_model_len": r"\bmax_seq_len=(\d{1,12})", "tensor_parallel_size": r"\btensor_parallel_size=(\d{1,5})",
            "pipeline_parallel_size": r"\bpipeline_parallel_size=(\d{1,5})",
            "data_parallel_size": r"\bdata_parallel_size=(\d{1,5})", "quantization": r"\bquantization=(\w{1,40})",
            "enforce_eager": r"\benforce_eager=(True|False)", "kv_cache_dtype": r"\bkv_cache_dtype=(\w{1,40})",
            "enable_prefix_caching": r"\benable_prefix_caching=(True|False)",
            "enable_chunked_prefill": r"\bchunked_prefill_enabled=(True|False)",
        }
        for field, pattern in patterns.items():
            if match := re.search(pattern, rest):
                self._set(field, _value(field, match[1]), source, keep=True)

    def _non_default(self, rest: str) -> None:
        source = "non-default args"
        for field in _NON_DEFAULT_FIELDS:
            match = re.search(r"'" + field + r"': (?:'([^']{1,500})'|([-\w.]{1,40}))", rest)
            if match:
                self._set(field, _value(field, match[1] if match[1] is not None else match[2]), source)
        if "'model_tag'" in rest and "model" not in self.settings:
            if match := re.search(r"'model_tag': '([^']{1,500})'", rest):
                self._set("model", match[1], source)

    def _set(self, field: str, value: Any, source: str, keep: bool = False) -> None:
        """Record a setting; an earlier, more explicit source (launch line, non-default args) wins when ``keep``."""
        if value is None:
            return
        if keep and field in self.settings:
            return
        self.settings[field] = value
        self.sources[field] = source

    def _figure(self, key: str, value: float | int, busiest: str = "first") -> None:
        old = self.figures.get(key)
        if old is None or (busiest == "max" and value > old) or (busiest == "min" and value < old):
            self.figures[key] = value

    def _memory(self, line: str) -> None:
        if match := _WEIGHTS.search(line):
            self._figure("weights_gib", float(match[1]), "max")
        if match := _V0_BUDGET.search(line):
            self._figure("total_memory_gib", float(match[1]))
            self._set("gpu_memory_utilization", float(match[2]), "memory profiling line", keep=True)
            self._figure("requested_memory_gib", float(match[3]))
        # NOTE: the profiling lines repeat the weights rounded to two decimals: "Model loading took" stays the figure.
        if match := _V0_TERMS.search(line):
            self._figure("weights_gib", float(match[1]))
            self._figure("non_torch_memory_gib", float(match[2]), "max")
            self._figure("activation_peak_gib", float(match[3]), "max")
            self._figure("available_kv_cache_gib", float(match[4]), "min")
        if match := _V0_PROFILE.search(line):
            self._figure("total_memory_gib", float(match[1]))
            self._figure("non_torch_memory_gib", float(match[3]), "max")
            self._figure("available_kv_cache_gib", float(match[4]), "min")
            self._set("gpu_memory_utilization", float(match[5]), "memory profiling line", keep=True)
            if "weights_gib" in self.figures:  # NOTE: V0 0.6.4 prints the torch peak with the weights in it
                self._figure("activation_peak_gib", round(float(match[2]) - float(self.figures["weights_gib"]), 4))
        if match := _FREE_ON_DEVICE.search(line):
            self._figure("free_memory_at_startup_gib", float(match[1]))
            self._figure("total_memory_gib", float(match[2]))
        if match := _DESIRED.search(line):
            self._set("gpu_memory_utilization", float(match[1]), "free-memory line", keep=True)
            self._figure("requested_memory_gib", float(match[2]))
        if match := _ACTUAL_SPLIT.search(line):
            self._figure("weights_gib", float(match[1]))
            self._figure("activation_peak_gib", float(match[2]), "max")
            self._figure("non_torch_memory_gib", float(match[3]), "max")
            self._figure("cudagraph_gib", float(match[4]), "max")
        if match := _ACTUAL_CONSUMED.search(line):
            self._figure("consumed_memory_gib", float(match[1]), "max")
            self._figure("activation_peak_gib", float(match[2]), "max")
            self._figure("cudagraph_gib", float(match[3]), "max")
        if match := _AVAILABLE_KV.search(line):
            self.engine = self.engine or "v1"  # NOTE: V1's worker line; V0 says "reserved for KV Cache"
            self._figure("available_kv_cache_gib", float(match[1]), "min")
        if (match := _EXPLICIT_KV.search(line)) or (match := _RESERVED_KV.search(line)):
            self._figure("available_kv_cache_gib", float(match[1]), "min")
            if _EXPLICIT_KV.search(line):
                self.device = "cpu"
                self._figure("total_memory_gib", float(match[2]))
        if match := _KV_IN_USE.search(line):
            self._figure("available_kv_cache_gib", float(match[1]), "min")
        if match := _GRAPH_POOL.search(line):
            self._figure("cudagraph_gib", float(match[1]), "max")
            self._figure("cudagraph_estimate_gib", float(match[2]), "max")
        if match := _GRAPH_TOOK.search(line):
            self._figure("cudagraph_gib", float(match[1]), "max")
        if match := _BLOCKS.search(line):
            self.engine = self.engine or "v0"
            label = match[1].lower()
            if label in ("cpu", "rocm") and match[3] is None or label == "rocm":
                self.device = "cpu" if label == "cpu" else "rocm"
            self._figure("num_gpu_blocks", int(match[2]), "min")
            if match[3] is not None:
                self._figure("num_cpu_blocks", int(match[3]))
        if match := _BLOCKS_OVERRIDE.search(line):
            self._figure("num_gpu_blocks", int(match[2]))
            self._set("num_gpu_blocks_override", int(match[2]), "\"Overriding num_gpu_blocks\"", keep=True)
        if match := _KV_TOKENS.search(line):
            self.engine = "v1"
            if match[1] == "CPU":
                self.device = "cpu"
            self._figure("kv_cache_tokens", _int(match[2]), "min")
        if match := _CONCURRENCY.search(line):
            self._figure("max_concurrency_tokens_per_request", _int(match[1]))
            self._figure("max_concurrency", float(match[2]), "min")

    def _outcome(self, line: str) -> None:
        if any(marker in line for marker in _STARTED):
            self.started = True
        failure: tuple[str, str] | None = None
        if match := _V1_MAX_LEN.search(line):
            self._figure("kv_cache_needed_gib", float(match[2]))
            self._figure("available_kv_cache_gib", float(match[3]), "min")
            if match[4] is not None:
                self._figure("estimated_max_model_len", int(match[4]))
            self._set("max_model_len", int(match[1]), "the error")
            failure = ("max_len", match[0])
        elif match := _V0_MAX_LEN.search(line):
            self._figure("kv_cache_tokens", int(match[2]), "min")
            self._set("max_model_len", int(match[1]), "the error")
            failure = ("max_len", match[0])
        elif _NO_KV_MEMORY in line:
            failure = ("no_kv_memory", _error_text(line, _NO_KV_MEMORY))
        elif _FREE_TOO_LOW.search(line):
            failure = ("free_memory", _error_text(line, "Free memory on device"))
        elif match := _LENGTH_LIMIT.search(line):
            failure = ("length_limit", _error_text(line, "User-specified max_model_len"))
        elif match := _OOM.search(line):
            failure = ("cuda_oom", _error_text(line, match[0]))
        elif (match := _ERROR_LINE.search(line)) and not re.search(r"\b(?:WARNING|INFO|DEBUG)\b", line[:80]):
            # NOTE: the first error is the root cause; the later ones wrap it ("Engine core initialization failed").
            self.first_error = self.first_error or f"{match[1]}: {match[2].strip()}"
        if failure and (self.failure is None or self.failure[0] == "cuda_oom" and failure[0] != "cuda_oom"):
            self.failure = failure

    # -- the result -------------------------------------------------------------------------------------------
    def result(self) -> StartupLog:
        figures = self.figures
        if "consumed_memory_gib" in figures and "weights_gib" in figures and "non_torch_memory_gib" not in figures:
            # NOTE: 0.27+ prints weights + non-torch as one figure; with "Model loading took" the rest is non-torch.
            figures["non_torch_memory_gib"] = round(figures["consumed_memory_gib"] - figures["weights_gib"], 2)
        printed = PrintedFigures(**figures)
        if not self.figures and not self.versions and not self.settings and self.failure is None:
            raise LogUnreadable(f"no vLLM start-up lines in these {self.lines:,} lines (no version, engine config, "
                                "memory figures or KV-cache lines): paste the log vLLM prints from launch to the "
                                "first request or the error")
        self._interleaved()
        version = max(self.versions, key=lambda v: VllmVersion.parse(v).key) if self.versions else None
        engine = self.engine
        if version and engine is None:
            engine = "v1" if VllmVersion.parse(version).at_least(8) else "v0"
        if version:  # NOTE: what the server printed wins over a container tag on the launch line
            self.settings["vllm_version"] = version
            self.sources["vllm_version"] = "the version line"
        missing = []
        if self.device != "cpu":
            missing.append("gpu")  # NOTE: vLLM never prints the GPU's name in its start-up log
        if "model" not in self.settings:
            missing.append("model")
        if "vllm_version" not in self.settings:
            missing.append("vllm_version")
        if self.device:
            self.settings.setdefault("device", self.device)
        return StartupLog(engine=engine, vllm_version=version, device=self.device, settings=self.settings,
                          sources=self.sources, printed=printed, outcome=self._final_outcome(printed),
                          missing=tuple(missing), notes=tuple(self.notes), lines_read=self.lines)

    def _interleaved(self) -> None:
        if len(self.versions) > 1:
            raise LogUnreadable(f"these lines came from two servers: vLLM {' and '.join(sorted(self.versions))} "
                                "both print their start-up here; paste one server's log")
        twice = [role for role, pids in self.engine_starts.items() if len(pids) > 1]
        if len(self.api_starts) > 1 or twice:
            raise LogUnreadable("these lines came from two servers (or two start-ups): the engine start-up line is "
                                "printed twice; paste one server's log")

    def _final_outcome(self, printed: PrintedFigures) -> Outcome:
        if self.failure is not None:
            kind, error = self.failure
            check = _CHECKS[kind]
            if kind == "cuda_oom":
                check = f"{check}, while {_oom_stage(printed)}"
            return Outcome(status="failed", error=error, check=check, kind=kind)  # type: ignore[arg-type]
        if self.started:
            return Outcome(status="started")
        if self.first_error:
            return Outcome(status="failed", error=self.first_error, check=_CHECKS["other"], kind="other")
        return Outcome(status="unknown")


def _oom_stage(printed: PrintedFigures) -> str:
    if printed.weights_gib is None:
        return "loading the weights"
    if printed.available_kv_cache_gib is None and printed.kv_cache_tokens is None and printed.num_gpu_blocks is None:
        return "profiling memory (the activation peak of a max_num_batched_tokens forward pass)"
    return "allocating the KV cache or capturing CUDA graphs (after the KV cache was sized)"


def _error_text(line: str, anchor: str) -> str:
    start = line.find(anchor)
    # NOTE: keep the exception's class name when the line has one ("ValueError: No available memory ...").
    head = re.search(r"([A-Za-z.]{0,60}(?:Error|Exception)): $", line[max(0, start - 80):start])
    text = (head[1] + ": " if head else "") + line[start:]
    return text.strip()[:600]


def _release(text: str) -> str:
    """``0.6.1.dev238+ge2c6e0a82`` -> ``0.6.1``; a text that is no release is kept for the caller to refuse."""
    match = re.match(r"(\d{1,4}\.\d{1,4}(?:\.\d{1,4})?)", text)
    return str(VllmVersion.parse(match[1])) if match else text


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _value(field: str, text: str) -> Any:
    if text in ("None", "none", "null"):
        return None
    if field in ("enforce_eager", "enable_expert_parallel", "enable_prefix_caching", "enable_chunked_prefill"):
        return text == "True"
    if field == "gpu_memory_utilization" or field == "cpu_offload_gb":
        try:
            return float(text)
        except ValueError:
            return None
    if field in ("model", "quantization", "kv_cache_dtype"):
        return text
    if field == "dtype":
        return DTYPE_NAMES.get(text.lower(), text)
    try:
        return int(text)
    except ValueError:
        return None

