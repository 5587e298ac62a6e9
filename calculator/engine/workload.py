"""Concurrency for a real workload, and what PagedAttention saves over contiguous allocation.

Pure arithmetic on an ``Estimate``'s KV layout. vLLM's "Maximum concurrency" assumes every request runs to
``max_model_len``; real requests are shorter, share prefixes (prefix caching shares *full* blocks only) and
fan out into ``n`` samples (each sample is its own request whose full prompt blocks are shared; the partial
last prompt block is copied on write).
"""

from __future__ import annotations

import math

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from .estimate import Estimate
from .flag_checks import mla_forces_chunked_prefill_off
from .kv_cache import group_blocks_per_request, in_flight_tokens


class Workload(BaseModel):
    """Request lengths and sharing; percentiles are optional (p95 defaults to the mean)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    prompt_tokens_mean: int = Field(1024, ge=1, le=10_000_000)
    output_tokens_mean: int = Field(256, ge=0, le=10_000_000)
    prompt_tokens_p95: int | None = Field(None, ge=1, le=10_000_000)
    output_tokens_p95: int | None = Field(None, ge=0, le=10_000_000)
    shared_prefix_tokens: int = Field(0, ge=0, le=10_000_000)  # a system prompt every request starts with
    parallel_samples: int = Field(1, ge=1, le=1024)  # the request's ``n``
    target_concurrent_requests: int = Field(1, ge=1, le=10_000_000)

    @model_validator(mode="after")
    def _prefix_within_prompt(self) -> Workload:
        if self.shared_prefix_tokens > self.prompt_tokens_mean:
            raise ValueError("shared_prefix_tokens cannot exceed the mean prompt length")
        return self


class RequestFootprint(BaseModel):
    """Block ids one request (with its n samples) holds at its peak, split into shared and private parts."""

    model_config = ConfigDict(frozen=True)
    prompt_tokens: int
    output_tokens: int
    private_blocks: int  # per request, all samples
    prefix_blocks: int  # shared by every request (counted once in the pool)
    tokens_stored: int  # tokens the private + prefix blocks really hold for this request

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


ConcurrencyLimit = Literal["KV cache", "max_num_seqs"]


class WorkloadCapacity(BaseModel):
    """How many requests of this workload run at once on one engine, paged vs contiguous.

    The scheduler runs at most ``max_num_seqs`` sequences (each of a request's ``n`` samples is one), so the
    figures are min(what the KV cache holds, max_num_seqs // n); ``limited_by_*`` names the bound that binds.
    """

    model_config = ConfigDict(frozen=True)
    mean: RequestFootprint
    p95: RequestFootprint
    concurrency_mean: int  # requests of mean length that run together
    concurrency_p95: int  # requests of p95 length that run together (the planning figure)
    kv_concurrency_mean: int  # what the KV cache alone would hold
    kv_concurrency_p95: int
    seqs_concurrency: int  # max_num_seqs // n: what the scheduler admits
    limited_by_mean: ConcurrencyLimit
    limited_by_p95: ConcurrencyLimit
    naive_concurrency: int  # contiguous allocation: every request (and sample) reserves max_model_len
    paged_waste_fraction: float  # slots allocated but empty in the last blocks, at p95
    naive_waste_fraction: float  # reserved but unused tokens under contiguous allocation, at p95
    prefix_caching: bool  # whether shared prefixes (and, in V1, the samples' prompts) are stored once
    data_parallel_size: int  # engines in the deployment (--data-parallel-size)
    meets_target: bool  # the whole deployment (all its engines) runs the target at once
    replicas_for_target: int  # engines (each with the estimate's GPUs) needed for the target concurrency

    @computed_field  # type: ignore[prop-decorator]
    @property
    def deployment_concurrency_p95(self) -> int:
        """Requests of p95 length the whole deployment (every data-parallel engine) runs at once."""
        return self.concurrency_p95 * self.data_parallel_size


def prefix_caching_enabled(result: Estimate) -> bool:
    """``--enable-prefix-caching`` as vLLM resolves it: on by default in V1, off in V0, and off for MLA models in
    0.7.1-0.7.3 whatever the flag says."""
    if result.model.mla is not None and mla_forces_chunked_prefill_off(result.rules):
        return False
    given = result.scenario.enable_prefix_caching
    return given if given is not None else result.rules.engine == "v1"


def _footprint(result: Estimate, workload: Workload, prompt: int, output: int) -> RequestFootprint:
    layout, s = result.layout, result.settings
    caching = prefix_caching_enabled(result)
    # NOTE: V1 runs the n samples as n requests that share their prompt through the prefix cache; V0 forks the
    # sequence group, sharing the prompt blocks copy-on-write whether or not prefix caching is on.
    samples_share_prompt = caching or result.rules.engine == "v0"
    in_flight = in_flight_tokens(result.rules, max_num_batched_tokens=s.max_num_batched_tokens,
                                 pipeline_parallel_size=s.pipeline_parallel_size, async_scheduling=s.async_scheduling)
    total = min(prompt + output, s.max_model_len)
    prefix = min(workload.shared_prefix_tokens, prompt) if caching else 0
    private = prefix_blocks = stored = 0
    for group in layout.groups:
        block = group.block_size
        if group.kind == "mamba":
            # NOTE: a recurrent state per sample, whatever the length (two blocks in mamba_cache_mode "align")
            private += group.state_blocks * workload.parallel_samples
            continue
        if group.kind == "sliding_window":
            # A window keeps only its last tokens, so it shares nothing for long and needs the same per sample.
            per_sample = group_blocks_per_request(group, total, in_flight)
            private += per_sample * workload.parallel_samples
            continue
        shared_prefix = prefix // block  # only full blocks are cached and shared
        prompt_full = prompt // block if samples_share_prompt else 0  # the n samples share full prompt blocks
        own_prompt_full = prompt_full - shared_prefix
        per_sample_tail = math.ceil(total / block) - prompt_full  # copy-on-write tail + generated tokens
        private += own_prompt_full + per_sample_tail * workload.parallel_samples
        prefix_blocks += shared_prefix
    stored = prompt + output * workload.parallel_samples
    return RequestFootprint(prompt_tokens=prompt, output_tokens=output, private_blocks=private,
                            prefix_blocks=prefix_blocks, tokens_stored=stored)


def _fitting(usable_blocks: int, footprint: RequestFootprint) -> int:
    if footprint.private_blocks == 0:
        return 0
    return max(0, (usable_blocks - footprint.prefix_blocks) // footprint.private_blocks)


def workload_capacity(result: Estimate, workload: Workload) -> WorkloadCapacity:
    """Concurrent requests of this workload on one engine of ``result``, and the replicas for the target."""
    mean = _footprint(result, workload, workload.prompt_tokens_mean, workload.output_tokens_mean)
    p95 = _footprint(result, workload, workload.prompt_tokens_p95 or workload.prompt_tokens_mean,
                     workload.output_tokens_p95 if workload.output_tokens_p95 is not None
                     else workload.output_tokens_mean)
    usable = max(result.capacity.num_gpu_blocks - 1, 0)  # block 0 is the permanent null block
    kv_mean, kv_p95 = _fitting(usable, mean), _fitting(usable, p95)
    seqs = result.settings.max_num_seqs // workload.parallel_samples
    concurrency_mean, concurrency_p95 = min(kv_mean, seqs), min(kv_p95, seqs)
    block = result.layout.block_size
    naive_slots = usable * block // result.settings.max_model_len
    naive_concurrency = naive_slots // workload.parallel_samples
    groups = max(1, len(result.layout.groups))
    allocated_tokens = p95.private_blocks * block / groups
    shared = min(workload.shared_prefix_tokens, p95.prompt_tokens) if prefix_caching_enabled(result) else 0
    used_tokens = min(p95.total_tokens, result.settings.max_model_len) - shared // block * block
    used_tokens += (workload.parallel_samples - 1) * p95.output_tokens
    paged_waste = max(0.0, 1 - used_tokens / allocated_tokens) if allocated_tokens else 0.0
    reserved = result.settings.max_model_len * workload.parallel_samples
    naive_used = min(p95.total_tokens, result.settings.max_model_len) + (workload.parallel_samples - 1) * p95.output_tokens
    naive_waste = max(0.0, 1 - naive_used / reserved)
    target, engines = workload.target_concurrent_requests, result.scenario.data_parallel_size
    replicas = math.ceil(target / concurrency_p95) if concurrency_p95 else 0
    return WorkloadCapacity(mean=mean, p95=p95, concurrency_mean=concurrency_mean, concurrency_p95=concurrency_p95,
                            kv_concurrency_mean=kv_mean, kv_concurrency_p95=kv_p95, seqs_concurrency=seqs,
                            limited_by_mean=_limit(kv_mean, seqs), limited_by_p95=_limit(kv_p95, seqs),
                            naive_concurrency=naive_concurrency, paged_waste_fraction=paged_waste,
                            naive_waste_fraction=naive_waste, prefix_caching=prefix_caching_enabled(result),
                            data_parallel_size=engines, meets_target=concurrency_p95 * engines >= target,
                            replicas_for_target=replicas)


def _limit(kv_concurrency: int, seqs_concurrency: int) -> ConcurrencyLimit:
    return "max_num_seqs" if seqs_concurrency < kv_concurrency else "KV cache"


def paged_slots(request_tokens: list[int], block_size: int) -> int:
    """Token slots PagedAttention allocates for these requests: each rounds up to whole blocks."""
    return sum(math.ceil(tokens / block_size) * block_size for tokens in request_tokens)
