"""Leave-one-out: each record scored with the record-fitted constants refitted without it.

The overhead constants of ``calculator/engine/overheads.py`` come from the calibration records they cite, so scoring
those records with them is in-sample. Here every such constant is refitted without the set-up being scored (a
deployment measured twice goes out whole), and the record is scored again with the refitted value: the difference
is taken out of the KV budget through ``Scenario.overhead_adjustment_gib``. A record that set no constant keeps its
prediction: for it, the constants are held out already. Used by ``benchmarks/accuracy.py``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection
from dataclasses import dataclass

from calculator.engine.calibration_records import CalibrationCase
from calculator.engine.cudagraph_budget import uses_model_runner_v2
from calculator.engine.estimate import Estimate, estimate
from calculator.engine.interconnect import P2P_BUFFER_BYTES, has_nvls
from calculator.engine.overheads import (
    ERA_CONSTANTS,
    FREE_DROP_PERSISTENT_BYTES,
    PENALTY_STATE_FROM_MINOR,
    ROCM_EXTRA_NON_TORCH_BYTES,
    forward_activation_bytes,
    penalty_state_bytes,
    sampler_activation_bytes,
)
from calculator.units import GIB


@dataclass(frozen=True)
class Fit:
    """One constant fitted on records: its value, each set-up's value, and which budgets carry it."""

    constant: str
    used: float  # GiB, or fp32 logits copies for a sampler
    setups: dict[tuple[str, ...], float]  # the records of one set-up -> the value they gave
    aggregate: Callable[[list[float]], float]
    applies: Callable[[Estimate], bool]
    sampler: bool = False  # in logits copies: moves the activation peak only where the sampler sets it
    # NOTE: what the constant falls back to when every set-up is left out (a whole source can be): the same constant
    # of the neighbouring era, set by other sources, where the mechanism is the same; else nothing (0).
    prior: float = 0.0
    # NOTE: ... or, where part of the constant is read from vLLM's source, that part for the deployment (GiB).
    source_prior: Callable[[Estimate], float] | None = None

    def without(self, record_ids: str | Collection[str], result: Estimate | None = None) -> float | None:
        """The constant refitted without the set-ups of ``record_ids`` (None: none of them helped set it).

        With every set-up left out: ``source_prior`` for ``result`` where there is one, else ``prior``.
        """
        left_out = {record_ids} if isinstance(record_ids, str) else set(record_ids)
        if not any(left_out.intersection(records) for records in self.setups):
            return None
        rest = [value for records, value in self.setups.items() if not left_out.intersection(records)]
        if rest:
            return self.aggregate(rest)
        return self.source_prior(result) if self.source_prior and result is not None else self.prior

    def shift_bytes(self, result: Estimate, refitted: float) -> int:
        """How much more memory the budget holds outside the KV cache with the refitted value."""
        if not self.sampler:
            return round((refitted - self.used) * GIB)
        s, spec = result.settings, result.model
        sampler = sampler_activation_bytes(spec, max_num_seqs=s.max_num_seqs,
                                           max_num_batched_tokens=s.max_num_batched_tokens, rules=result.rules)
        forward = forward_activation_bytes(spec, max_num_batched_tokens=s.max_num_batched_tokens,
                                           activation_dtype_bytes=s.dtype_bytes,
                                           tensor_parallel_size=s.tensor_parallel_size, rules=result.rules)
        return max(forward, round(sampler * refitted / self.used)) - max(forward, sampler)


def _era(*eras: str) -> Callable[[Estimate], bool]:
    return lambda result: result.rules.overhead_era in eras and result.settings.device != "cpu"


def _penalty_state_gib(result: Estimate) -> float:
    """Model Runner V2's penalty tensors (``overheads.penalty_state_bytes``), the part of the 0.27+ persistent memory
    read from vLLM's source: what stands for it when the one source that measured it is left out."""
    if not (result.rules.version.at_least(PENALTY_STATE_FROM_MINOR)
            and uses_model_runner_v2(result.rules, result.model, result.quantization)):
        return 0.0
    return penalty_state_bytes(max_num_seqs=result.settings.max_num_seqs, vocab_size=result.model.vocab_size) / GIB


def _p2p(*links: str) -> Callable[[Estimate], bool]:
    """TP > 1 over one of ``links`` without NVLS: the P2P buffers of ``interconnect.py`` apply."""
    return lambda result: (result.settings.tensor_parallel_size > 1 and result.settings.interconnect in links
                           and not has_nvls(result.settings.interconnect, result.gpu))


FITS = (
    # overheads.py cites each set-up with the value below (GiB beyond the 0.6.4+ terms; non-torch at TP=1).
    Fit("ERA_CONSTANTS['v0_used_memory'].held_after_profile_bytes", ERA_CONSTANTS["v0_used_memory"]
        .held_after_profile_bytes / GIB, {("vllm-pr4454-a6000-opt-125m",): 0.65,
                                           ("vllm-pr4454-a6000-meta-llama-3-8b-instruct",): 1.03,
                                           ("vllm-pr4454-a6000-zephyr-7b-beta-awq",): 1.11,
                                           ("file-mi300x-llama2-7b-tp1-v063dev",): 1.35},
        statistics.mean, _era("v0_used_memory")),
    Fit("ERA_CONSTANTS['v0'].non_torch_tp1_bytes", ERA_CONSTANTS["v0"].non_torch_tp1_bytes / GIB,
        {("file-uitars-7b-24gb-v066",): 0.28, ("file-80gb-phi4-bnb-lora-util070",): 0.09,
         ("file-a100-40g-phi4-mini-ft-v073",): 0.01}, statistics.mean, _era("v0", "v0_used_memory")),
    Fit("ERA_CONSTANTS['v1'].non_torch_tp1_bytes", ERA_CONSTANTS["v1"].non_torch_tp1_bytes / GIB,
        {("llmd-h100-llama31-8b",): 0.13, ("llmd-h100-qwen3-0.6b-16k", "llmd-h100-qwen3-0.6b-32k"): 0.13,
         ("llmd-h100-qwen3-32b-tp1-16k", "llmd-h100-qwen3-32b-tp1-32k-failed"): 0.14,
         ("llmd-h100-gpt-oss-20b",): 0.13, ("file-24gb-qwen3-8b-fp8-util080-len1k",): 0.02,
         ("file-80gb-llava16-mistral-7b-v0102",): 0.07, ("file-44gb-llama32-1b-default-v0101dev",): 0.02},
        statistics.mean, _era("v1"), prior=ERA_CONSTANTS["v0"].non_torch_tp1_bytes / GIB),
    # fp32 logits copies: the printed activation peak / one copy of min(seqs, tokens) x vocab (benchmark output)
    Fit("ERA_CONSTANTS['v1'].sampler_logits_copies", ERA_CONSTANTS["v1"].sampler_logits_copies,
        {("llmd-h100-llama31-8b",): 9.73, ("llmd-h100-qwen3-0.6b-16k", "llmd-h100-qwen3-0.6b-32k"): 9.59,
         ("llmd-h100-qwen3-32b-tp1-16k", "llmd-h100-qwen3-32b-tp1-32k-failed"): 9.73,
         ("llmd-h100-gpt-oss-20b",): 9.62, ("file-24gb-qwen3-8b-fp8-util080-len1k",): 9.66}, statistics.mean,
        _era("v1"), sampler=True,
        prior=ERA_CONSTANTS["v0"].sampler_logits_copies),
    Fit("FREE_DROP_PERSISTENT_BYTES", FREE_DROP_PERSISTENT_BYTES / GIB,
        {("blog-l40s-qwen3-14b-awq-tuned",): 0.49, ("blog-l4-qwen3-14b-awq-pp2",): 0.70,
         ("blog-l4-qwen3-14b-awq-single", "blog-l4-qwen3-14b-awq-replica"): 0.38}, statistics.median,
        lambda result: (result.rules.version.at_least(27) and result.settings.device == "cuda"
                        and not result.settings.enforce_eager),  # eager: the source-read state only
        source_prior=_penalty_state_gib),
    # interconnect.py: NCCL's P2P buffers at TP > 1 (non-torch printed minus the era's TP = 1 figure).
    Fit("P2P_BUFFER_BYTES['pcie']", P2P_BUFFER_BYTES["pcie"] / GIB,
        {("vllm-13061-2x4090-r1-distill-qwen14b-tp2-failed",): 0.12}, statistics.mean, _p2p("pcie")),
    Fit("P2P_BUFFER_BYTES['nvlink']", P2P_BUFFER_BYTES["nvlink"] / GIB,
        {("vllm-16570-4xa100-40g-qwen25-vl-72b-tp4",): 0.25}, statistics.mean, _p2p("nvlink", "nvswitch", "xgmi")),
    Fit("ROCM_EXTRA_NON_TORCH_BYTES", ROCM_EXTRA_NON_TORCH_BYTES / GIB,
        {("file-rocm-24gb-opt125m-serverlessllm",): 0.40}, statistics.mean,
        lambda result: result.settings.device == "rocm"),
)


@dataclass(frozen=True)
class HeldOut:
    """One record scored with every constant it helped set refitted without it."""

    result: Estimate
    refitted: tuple[tuple[str, float], ...]  # (constant, value without this record)


def held_out(case: CalibrationCase, result: Estimate, together: Collection[str] = ()) -> HeldOut:
    """``result`` again, with each constant ``case`` helped fit refitted without it (unchanged when none).

    ``together``: more records to leave out with it (the other records of its source, for leave-one-source-out).
    """
    shift, refitted = 0, []
    for fit in FITS:
        value = fit.without({case.record_id, *together}, result)
        if value is None or not fit.applies(result):
            continue
        shift += fit.shift_bytes(result, value)
        refitted.append((fit.constant, value))
    if not refitted:
        return HeldOut(result=result, refitted=())
    scenario = case.scenario.replace(overhead_adjustment_gib=case.scenario.overhead_adjustment_gib + shift / GIB)
    return HeldOut(result=estimate(scenario, result.model), refitted=tuple(refitted))


__all__ = ["FITS", "Fit", "HeldOut", "held_out"]
