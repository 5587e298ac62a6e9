"""The parts of docs/accuracy.md that issue 13 asks for: weights on every quantized record, the verdict on every
failed start-up with vLLM's message, the records left out of the statistics, and what the unscored records lack."""

from __future__ import annotations

from benchmarks.accuracy import Report, Row
from calculator.engine.estimate import applied_quantization
from calculator.engine.quant_kernels import expert_storage, resident_quantization
from calculator.engine.uncertainty import verdict, verdict_reason
from calculator.units import GIB


def findings_sections(report: Report) -> list[str]:
    return [*_excluded(report), *_stand_ins(report), *_quantized_weights(report), *_failed_startups(report),
            *_mechanisms()]


def _stand_ins(report: Report) -> list[str]:
    rows = [row for row in report.rows if row.stand_in]
    lines = ["## Scored on stand-in configs", "",
             "Records whose checkpoint's config.json is not bundled but whose architecture is (`benchmarks/"
             "stand_ins.py`: a fine-tune, the base model of an instruct sibling, a conversion or quantization of it, "
             "with what differs). They are scored and their start-ups judged, out of the statistics above.", "",
             "| record | stand-in | weights % | available KV % | KV tokens % | started / verdict |",
             "|---|---|---:|---:|---:|---|"]
    for row in rows:
        if row.result is None:
            lines.append(f"| {row.case.record_id} | {row.stand_in.preset} | - | - | - | not run: {row.problem} |")
            continue
        errors = row.errors["ours"]
        cells = [f"{errors[m]:+.2f}" if m in errors else "-" for m in ("weights_gib", "available_kv_gib",
                                                                         "kv_cache_tokens")]
        started = {True: "yes", False: "no", None: "?"}[row.case.observed.started]
        lines.append(f"| {row.case.record_id} | {row.stand_in.preset} | {' | '.join(cells)} | "
                     f"{started} / {verdict(row.result)} |")
    return [*lines, ""]


def _excluded(report: Report) -> list[str]:
    rows = [row for row in report.scored() if row.excluded]
    return ["## Shown but not in the statistics", "",
            *[f"- `{row.case.record_id}`: {row.excluded}" for row in rows], ""]


def _quantization_of(row: Row):
    return applied_quantization(row.case.scenario, row.result.model)


def _format(row: Row) -> str:
    quant = _quantization_of(row)
    result = row.result
    label = f"{quant.method} {quant.weight_bits:g}-bit"
    if quant.weight_block_size:
        label += f", {quant.weight_block_size[0]}x{quant.weight_block_size[1]} blocks"
    elif quant.group_size:
        label += f", groups of {quant.group_size}"
    storage = expert_storage(quant, result.rules, result.gpu, result.settings.device)
    if storage is not None:
        label += f"; experts: {storage.backend}"
    if resident_quantization(quant, result.gpu, result.settings.device, result.settings.dtype_bytes) != quant:
        label += "; Marlin (no FP8 tensor cores): scales in the model dtype"
    return label


def _quantized_weights(report: Report) -> list[str]:
    rows = [row for row in report.scored() if _quantization_of(row) is not None]
    lines = ["## Weights on quantized checkpoints", "",
             "Every scored record whose weights are quantized, as vLLM holds them after `process_weights_after_loading`"
             " (MXFP4 experts laid out by the MoE kernel of that version and GPU: `calculator/engine/quant_kernels.py`)."
             " `-` = the record does not print the weights.", "",
             "| record | vLLM, GPU | format | printed GiB | ours GiB | error % |", "|---|---|---|---:|---:|---:|"]
    for row in rows:
        printed = row.case.observed.weights_gib
        ours = row.result.budget.weights_bytes / GIB
        error = row.errors["ours"].get("weights_gib")
        gpu = row.result.gpu.name if row.result.gpu else "custom"
        lines.append(f"| {row.case.record_id} | {row.case.vllm_version}, {gpu} | {_format(row)} | "
                     f"{printed if printed is not None else '-'} | {ours:.2f} | "
                     f"{f'{error:+.2f}' if error is not None else '-'} |")
    return [*lines, ""]


def _failed_startups(report: Report) -> list[str]:
    rows = [row for row in report.rows if row.case.observed.started is False]
    lines = ["## Failed start-ups", "",
             "Every record whose start-up failed, with our verdict and vLLM's message for the modelled version (or, "
             "for a borderline call, the reason); \"(stand-in)\" marks a record run on a stand-in config, and a "
             "record that cannot be run says what it lacks.", "",
             "| record | vLLM (modelled) | what happened | verdict | vLLM's message / reason |", "|---|---|---|---|---|"]
    for row in rows:
        outcome = str(row.record.get("observed", {}).get("startup_outcome") or "failed").replace("|", "/")
        name = row.case.record_id + (" (stand-in)" if row.stand_in else "")
        if row.result is None:
            lines.append(f"| {name} | {row.case.vllm_version} | {outcome} | none | {missing_config(row)} |")
            continue
        reason = (verdict_reason(row.result) or "").replace("|", "/")
        lines.append(f"| {name} | {row.case.vllm_version} | {outcome} | {verdict(row.result)} | {reason} |")
    return [*lines, ""]


def _mechanisms() -> list[str]:
    return [
        "## Mechanisms behind the 2026-12 records", "",
        "- **MXFP4 experts** (`calculator/engine/quant_kernels.py`): Marlin pads gpt-oss's 2,880 to 2,944 / 3,072 "
        "(Hopper up to 0.11, Ampere, Ada, GeForce and GB10); the vendored Triton kernels on Hopper (0.12+) keep a "
        "swizzled scale copy padded to 256 rows beside the checkpoint's scales until 0.24 and cast the biases to "
        "fp32; FlashInfer TRT-LLM on B200/B300 pads both sizes to 256 (intermediate 128 from 0.27).",
        "- **Other packed formats** (`calculator/engine/quant_kernels.py`, checked in the 0.10-0.34 wheels): FP8 on "
        "GPUs below compute capability 8.9 (A100, A10, RTX 3090) runs through Marlin, whose scales are one per output "
        "channel and 128-input group in the model dtype (32 times the bytes of 128 x 128 fp32 block scales: +1.1 % "
        "on Qwen3-8B-FP8); on FP8 GPUs the block scales stay as stored (DeepGEMM's UE8M0 requantization is in "
        "place). AWQ and GPTQ Marlin repacking keeps every element count (`marlin_permute_scales`, "
        "`awq_to_marlin_zero_points`; GPTQ act-order keeps `g_idx` and the sort indices, already counted). NVFP4's "
        "`swizzle_blockscale` pads scale rows to 128 and scale columns to 4: below 0.05 % of the weights for every "
        "bundled shape but gpt-oss's 2,880-wide ones (0.25 %, and gpt-oss ships as MXFP4), so it is not modelled "
        "(`tests/test_quant_kernels.py`).",
        "- **CUDA graphs in the budget** (`calculator/engine/cudagraph_budget.py`): subtracted from 0.20 "
        "(`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` defaults to 1), except with `--enforce-eager`, on ROCm before "
        "0.26, and under Model Runner V2 before 0.29, whose `profile_cudagraph_memory` returns 0. V2 is the default "
        "for dense models from 0.25 (for a few architectures from 0.22), and DSpark forces it: "
        "`file-b300-dsv4-flash-0731-v0260-dspark` closes without its 3.06 GiB of graphs. "
        "`file-gb10-qwen38-27b-786k-v0271` (a hybrid, Model Runner V1) does subtract its 1.94 GiB estimate: 0.27+ "
        "print it inside \"peak activation\" (3.78 = 1.84 + 1.94).",
        "- **Unified memory** (`GpuSpec.memory_architecture`, `calculator/engine/overheads.py`): on GB10 vLLM reads "
        "free memory as the host's MemAvailable, so the OS and vLLM's own processes count as used at start (7.37 GiB "
        "on `file-gb10-qwen38-27b-786k-v0271`) and the host side's growth as non-torch memory; "
        "`file-gb10-qwen25-14b-fp8dyn-util015-failed-v0130nv` (no bundled config) fails at utilization 0.15 with "
        "\"No available memory for the cache blocks\", which the same settings on the Qwen2.5-14B config with vLLM's "
        "per-channel FP8 reproduce (`tests/test_unified_memory.py`). Where vLLM reads free memory is versioned "
        "(`calculator/engine/free_memory.py`): `mem_get_info` up to 0.11.0 (on GB10 that is MemFree, so the page "
        "cache counts as used), MemAvailable for Orin/Thor/Spark compute capabilities from 0.11.1, and for every "
        "`is_integrated` GPU from 0.20 (vllm#35356). A GH200 in NUMA (\"unified\") mode, `GH200 96GB, NUMA mode` in "
        "the catalog, is read through `mem_get_info` before 0.20, which counts the kernel's pages on the HBM node "
        "(the checkpoint's page cache) as used (vllm#35313: 74.9 of 142.5 GiB free), so a checkpoint larger than "
        "the slack makes the start borderline; from 0.20 the host's MemAvailable (LPDDR5X and HBM) passes the "
        "start-up check and the host side's growth is non-torch memory, as on GB10.",
        "",
    ]


def missing_config(row: Row) -> str:
    """What the record lacks to be scored: the checkpoint's config.json, named as precisely as the record allows."""
    annotations = row.record.get("annotations") or {}
    architecture = annotations.get("architecture") or "architecture not stated"
    model = row.case.model
    if row.stand_in:
        return f"{model} ({architecture}): the stand-in config {row.stand_in.preset} would serve, but {row.problem}."
    first = model.split()[0] if model.split() else model
    if "/" in first and not first.startswith("/"):
        where = f"the config.json of `{first}` (no exact public copy found)"
    else:
        where = "the config.json of a local or unnamed checkpoint, which was not published"
    return f"{model} ({architecture}): needs {where}."
