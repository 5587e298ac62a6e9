""""How it was calculated": every formula of an estimate with its current numbers filled in (pure text)."""

from __future__ import annotations

from .engine.estimate import Estimate
from .engine.uncertainty import confidence, start_risks
from .engine.kv_cache import group_blocks_per_request, in_flight_tokens
from .engine.overheads import (
    FORWARD_HIDDEN_TENSORS,
    FORWARD_INTERMEDIATE_TENSORS,
    cudagraph_capture_sizes,
    max_capture_size,
    sampler_logits_copies,
)
from .units import GIB, plural


def _g(num_bytes: float) -> str:
    return f"{num_bytes / GIB:,.2f} GiB"


def explanation(result: Estimate) -> list[tuple[str, str]]:
    """(step, markdown) pairs, in the order vLLM computes them; numbers are the busiest GPU's."""
    s, b, layout, cap, spec = result.settings, result.budget, result.layout, result.capacity, result.model
    steps: list[tuple[str, str]] = []
    steps.append(("GPU memory", f"The driver reports **{_g(b.total_bytes)}** per GPU "
                  f"({result.gpu.name if result.gpu else 'custom'}); vLLM {result.rules.version}: {result.rules.era}."))
    if b.kv_cache_memory_bytes_given:
        steps.append(("Budget", f"`--kv-cache-memory-bytes` fixes the KV cache at **{_g(b.kv_cache_bytes)}**; "
                      "gpu_memory_utilization is ignored."))
    else:
        steps.append(("Budget", f"requested = ⌈total × gpu_memory_utilization⌉ = {_g(b.total_bytes)} × "
                      f"{b.gpu_memory_utilization:g} = **{_g(b.requested_bytes)}**"))
    roles = ", ".join(f"{role} {_g(size)}" for role, size in _weights_by_role(result).items())
    steps.append(("Weights", f"{spec.num_params:,} parameters, dtype {s.dtype}"
                  f"{', ' + s.quantization if s.quantization else ''}, split over TP={s.tensor_parallel_size} × "
                  f"PP={s.pipeline_parallel_size}: **{_g(b.weights_bytes)}** on the busiest GPU ({roles})."))
    mlp = spec.intermediate_size / s.tensor_parallel_size if spec.moe is None else None
    forward = (f"{s.max_num_batched_tokens:,} tokens × ({FORWARD_HIDDEN_TENSORS} × {spec.hidden_size:,} + "
               f"{FORWARD_INTERMEDIATE_TENSORS} × {mlp:,.0f}) × {s.dtype_bytes} B" if mlp is not None
               else f"{s.max_num_batched_tokens:,} tokens × ({FORWARD_HIDDEN_TENSORS} × hidden + "
                    f"{FORWARD_INTERMEDIATE_TENSORS} × top-k expert rows per rank) × {s.dtype_bytes} B")
    rows = min(s.max_num_seqs, s.max_num_batched_tokens)
    steps.append(("Activation peak", f"forward pass = {forward}; sampler = {sampler_logits_copies(result.rules)} × "
                  f"{rows:,} rows × {spec.vocab_size:,} vocab × 4 B; they run one after the other, so the peak is "
                  f"the larger: **{_g(b.activation_bytes)}**."))
    steps.append(("Non-torch memory", f"cuBLAS workspaces and NCCL buffers that grow with TP: **{_g(b.non_torch_bytes)}**."))
    ceiling = max_capture_size(result.rules, result.gpu.compute_capability if result.gpu else None)
    sizes = cudagraph_capture_sizes(s.max_num_seqs, result.rules, s.max_num_batched_tokens, ceiling)
    where = b.cudagraph_note or ("subtracted from the KV budget" if b.cudagraph_in_budget
                                 else "paid from the (1 − util) headroom")
    steps.append(("CUDA graphs", "none (enforce-eager)" if s.enforce_eager else
                  f"{len(sizes)} capture sizes up to {max(sizes)}: **{_g(b.cudagraph_bytes)}**, {where}."))
    if b.formula == "v1_extensible":
        steps.append(("KV cache (extensible, 0.34)", "KV = min(requested − used, free − max(1 GiB, 0.75 × peak)) − "
                      f"peak = **{_g(b.kv_cache_bytes)}** (margin kept: {_g(b.extensible_reserve_bytes)})."))
    elif not b.kv_cache_memory_bytes_given:
        graphs = f" − {_g(b.cudagraph_bytes)}" if b.cudagraph_in_budget else ""
        steps.append(("KV cache", f"KV = {_g(b.requested_bytes)} − {_g(b.weights_bytes)} − {_g(b.activation_bytes)} − "
                      f"{_g(b.non_torch_bytes)}{graphs} = **{_g(b.kv_cache_bytes)}**"))
    layer = next(layer for layer in spec.layers if layer.kind != "mamba")
    heads = "1 latent (MLA, replicated on every TP rank)" if layer.kind == "mla" else \
        f"max(1, {layer.num_kv_heads} KV heads // TP {s.tensor_parallel_size}) = {max(1, layer.num_kv_heads // s.tensor_parallel_size)} heads"
    steps.append(("KV bytes per token", f"{spec.num_attention_layers} attention layers × {heads} × "
                  f"(K {layer.head_size} + V {layer.head_size_v}) × {_kv_element(result)} = "
                  f"**{layout.kv_bytes_per_token:,.0f} B** per token per GPU."))
    steps.append(("Blocks", f"{len(layout.groups)} KV-cache group(s) of {layout.group_size} layer(s); a block of "
                  f"{layout.block_size} tokens costs {layout.bytes_per_block:,} B; "
                  f"num_gpu_blocks = ⌊{_g(max(b.kv_cache_bytes, 0))} / {layout.bytes_per_block:,} B⌋ = "
                  f"**{cap.num_gpu_blocks:,}**."))
    in_flight = in_flight_tokens(result.rules, max_num_batched_tokens=s.max_num_batched_tokens,
                                 pipeline_parallel_size=s.pipeline_parallel_size, async_scheduling=s.async_scheduling)
    per_group = " + ".join(f"{group_blocks_per_request(g, s.max_model_len, in_flight)}" for g in layout.groups)
    steps.append(("Concurrency", f"one request of {s.max_model_len:,} tokens needs {per_group} = "
                  f"{cap.blocks_per_request:,} blocks; max concurrency = {cap.num_gpu_blocks:,} / "
                  f"{cap.blocks_per_request:,} = **{cap.max_concurrency:.2f}x**; vLLM logs "
                  f"\"{' | '.join(result.log_lines())}\"."))
    return steps


def _weights_by_role(result: Estimate) -> dict[str, int]:
    """The four largest parts of the busiest GPU's weights."""
    return dict(sorted(result.weights_by_role.items(), key=lambda item: -item[1])[:4])


def _kv_element(result: Estimate) -> str:
    kv = result.settings.kv_cache_dtype
    if kv == "auto":
        return f"{result.settings.dtype_bytes} B ({result.settings.dtype})"
    return f"the {kv} size"


def deployment_line(result: Estimate) -> str:
    """The one-line header every page shows above its verdict: whose numbers these are."""
    s, scenario = result.settings, result.scenario
    gpu = result.gpu.name if result.gpu else ("CPU" if s.device == "cpu" else "custom GPU")
    if scenario.gpu_memory_gib is not None:
        gpu = f"{gpu} ({scenario.gpu_memory_gib:g} GiB)"
    engines = f" × {scenario.data_parallel_size} engines (DP)" if scenario.data_parallel_size > 1 else ""
    weights = s.dtype + (f" + {s.quantization}" if s.quantization else "")
    kv = s.kv_cache_dtype if s.kv_cache_dtype != "auto" else f"auto ({s.dtype})"
    return (f"{result.model.model_id} · {gpu} × {result.num_gpus}{engines} · TP {s.tensor_parallel_size} / "
            f"PP {s.pipeline_parallel_size} · max_model_len {s.max_model_len:,} · weights {weights} / KV {kv} · "
            f"vLLM {result.rules.version}" + (" (Docker image)" if scenario.install == "docker" else ""))


VERDICT_WORDS = {"fits with margin": "Fits", "borderline": "Borderline", "does not fit": "Does not fit",
                 "does not run": "Does not run"}


def verdict_word(verdict: str) -> str:
    """The word every page uses for an uncertainty verdict (the one the Plan page's sentence starts with)."""
    return VERDICT_WORDS.get(verdict, verdict.capitalize())


def lead_sentence(result: Estimate, verdict: str, weights_problem: str | None) -> str:
    """One plain sentence: fits / does not / borderline, and why, before any band or quote; an unknown
    architecture says so first."""
    sentence = _lead_sentence(result, verdict, weights_problem)
    if result.model.known_architecture:
        return sentence
    if verdict == "borderline":
        return ("Borderline, unknown architecture: " + result.model.architecture + " is estimated as a generic "
                "decoder, and the error band generic estimates need straddles the answer.")
    return (f"Unknown architecture {result.model.architecture} (estimated as a generic decoder, band widened): "
            f"{sentence[0].lower()}{sentence[1:]}")


def _borderline_cause(result: Estimate) -> str:
    """Why a deployment that starts at the estimate is borderline, in the order ``verdict_reason`` gives it."""
    if start_risks(result):
        return "something outside the memory budget can stop the start (why below)"
    if confidence(result) == "outside the records":
        return ("the error band, widened because the deployment lies outside the calibration records, reaches below "
                "what one full-length request needs")
    return "the calibrated error band reaches below what one full-length request needs"


def _lead_sentence(result: Estimate, verdict: str, weights_problem: str | None) -> str:
    s, cap = result.settings, result.capacity
    running = min(int(cap.max_concurrency), s.max_num_seqs)
    bound = "max_num_seqs" if s.max_num_seqs < int(cap.max_concurrency) else "the KV cache"
    room = (f"{_g(result.kv_cache_bytes)} of KV cache per GPU holds {cap.kv_cache_tokens:,} tokens: "
            f"{plural(running, 'request')} of the full {s.max_model_len:,} tokens "
            f"{'runs' if running == 1 else 'run'} at once (limited by {bound})")
    if verdict == "fits with margin":
        return f"Fits: vLLM {result.rules.version} starts, and {room}."
    if verdict == "borderline":
        if result.fits:
            return f"Borderline: vLLM starts at the estimate ({room}), but {_borderline_cause(result)}."
        return ("Borderline: vLLM refuses at the estimate, but would start if the overheads come out at the low end "
                "of the calibrated error band.")
    if verdict == "does not run":
        return (f"Does not run: vLLM {result.rules.version} cannot serve this deployment on "
                f"{s.device.upper()} (its error below).")
    if weights_problem:
        return f"Does not fit: {weights_problem}."
    if result.settings.error:
        return "Does not fit: vLLM refuses these settings before sizing memory (its message below)."
    if result.kv_cache_bytes <= 0:
        return ("Does not fit: nothing is left for the KV cache after the weights, the activation peak and the "
                "overheads.")
    # NOTE: the memory left is in vLLM's message below, as vLLM rounds it; repeating ours beside it (with or
    # without the null block) would print one figure twice, rounded two ways.
    return (f"Does not fit: one request of {s.max_model_len:,} tokens needs more KV cache than is left per GPU "
            f"(vLLM's message below); the largest max_model_len that fits is {result.max_fitting_model_len:,}.")
