"""vLLM's scheduler in steady state: how many requests run together, how prefill chunks share the token budget
with decodes, and how a burst of requests drains.

vLLM V1 schedules running requests first (one decode token each), then fills the rest of
``max_num_batched_tokens`` with prompt chunks (chunked prefill), and never runs more than ``max_num_seqs``
requests or more than the KV cache can hold.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .calibration import SpeedConstants
from .costs import ForwardCosts
from .hardware import GpuRates
from .step_time import StepTime, step_time

ConcurrencyLimit = Literal["requested", "max_num_seqs", "kv_cache"]
_FIXED_POINT_ROUNDS = 8
_MAX_PREFILL_STEPS_WALKED = 256  # longer prefills are walked in this many chunks, each standing for several


class ServedConcurrency(BaseModel):
    """Requests running together: the least of what is asked, ``max_num_seqs`` and what the KV cache holds."""

    model_config = ConfigDict(frozen=True)
    requested: int | None  # None under a request rate (the rate sets it)
    max_num_seqs: int
    kv_cache_limit: int  # requests of the workload's mean lengths whose KV fits together
    served: int
    binding: ConcurrencyLimit


def served_concurrency(requested: int | None, max_num_seqs: int, kv_cache_limit: int) -> ServedConcurrency:
    """The concurrency vLLM actually runs and the limit that sets it (ties name the engine's limit first)."""
    engine_limit = min(max_num_seqs, kv_cache_limit)
    binding: ConcurrencyLimit = "kv_cache" if kv_cache_limit < max_num_seqs else "max_num_seqs"
    if requested is not None and requested < engine_limit:
        binding, served = "requested", requested
    else:
        served = engine_limit if requested is not None else engine_limit
    return ServedConcurrency(requested=requested, max_num_seqs=max_num_seqs, kv_cache_limit=kv_cache_limit,
                             served=served, binding=binding)


class SteadyState(BaseModel):
    """The average step while ``running`` requests cycle through prefill and decode."""

    model_config = ConfigDict(frozen=True)
    running: float
    decode_batch: float  # requests decoding in an average step
    prefill_tokens_per_step: float  # prompt tokens of other requests riding along in an average step
    prefill_steps: int  # steps a mean prompt needs (chunks of what the budget leaves)
    decode_context_tokens: float  # mean context of a decoding request: prompt + half the output
    step: StepTime  # a decode step as a decoding request sees it (other requests' prompt chunks included)
    decode_only_step: StepTime  # the same step without prompt chunks


def steady_state(costs: ForwardCosts, rates: GpuRates, constants: SpeedConstants, *, running: float,
                 prompt_tokens: float, output_tokens: float, budget_tokens: int) -> SteadyState:
    """Closed-loop steady state: each request spends ``prefill_steps`` steps in prefill and output - 1 decoding.

    In an average step D = running x (O - 1) / (k + O - 1) requests decode and the others' prompts arrive at
    running x P / (k + O - 1) tokens per step; the budget left after the decodes sets k = ceil(P / left).
    """
    # NOTE: speculative decoding yields tokens_per_decode_step tokens per step, so a request decodes in fewer steps.
    decode_steps = max(output_tokens - 1, 0.0) / costs.tokens_per_decode_step
    k = max(1, math.ceil(prompt_tokens / budget_tokens))
    decode = prefill = 0.0
    for _ in range(_FIXED_POINT_ROUNDS):
        cycle = k + decode_steps
        decode = running * decode_steps / cycle
        prefill = running * prompt_tokens / cycle
        left = max(1.0, budget_tokens - decode)
        # NOTE: the others' chunks share what is left; a request's own chunk gets the rest of it.
        others = max(0.0, prefill - prompt_tokens / k)
        k = max(1, math.ceil(prompt_tokens / max(1.0, left - others)))
    # A decoding request rides with the prompt chunks of the *other* requests only.
    others_per_step = prefill * max(0.0, running - 1) / running if running > 0 else 0.0
    # NOTE: the average step stands for steps with and without those chunks, and vLLM 0.11+ replays the ones
    # without as one full CUDA graph; the chunks land about at random, so a step carries one with probability
    # 1 - exp(-chunks per step).
    chunks_per_step = max(0.0, running - 1) * k / (k + decode_steps)
    context = prompt_tokens + output_tokens / 2
    step = step_time(costs, rates, constants, decode_tokens=decode, decode_context_tokens=context,
                     prefill_tokens=others_per_step, prefill_start_tokens=prompt_tokens / 2,
                     requests=running, prompt_step_share=-math.expm1(-chunks_per_step))
    decode_only = step_time(costs, rates, constants, decode_tokens=max(decode, 1.0), decode_context_tokens=context)
    return SteadyState(running=running, decode_batch=decode, prefill_tokens_per_step=others_per_step,
                       prefill_steps=k, decode_context_tokens=context, step=step, decode_only_step=decode_only)


def prefill_time_s(costs: ForwardCosts, rates: GpuRates, constants: SpeedConstants, *, prompt_tokens: int,
                   state: SteadyState, budget_tokens: int) -> float:
    """Time from scheduling a prompt to its first token: its chunks, each in a step with the running decodes."""
    left = max(1.0, budget_tokens - state.decode_batch - state.prefill_tokens_per_step)
    chunk = max(1.0, min(float(prompt_tokens), left))
    steps = math.ceil(prompt_tokens / chunk)
    walked = min(steps, _MAX_PREFILL_STEPS_WALKED)
    weight = steps / walked
    total = 0.0
    for i in range(walked):
        start = i * weight * chunk
        size = min(chunk * weight, prompt_tokens - start) / weight
        total += weight * step_time(costs, rates, constants, decode_tokens=state.decode_batch,
                                    decode_context_tokens=state.decode_context_tokens,
                                    prefill_tokens=size + state.prefill_tokens_per_step,
                                    prefill_start_tokens=start, requests=state.running).total_s
    return total


class BurstTimeline(BaseModel):
    """``requests`` submitted together and served as one batch (offline runs, ``benchmark_latency``)."""

    model_config = ConfigDict(frozen=True)
    requests: int
    prefill_s: float  # all prompts, in budget-sized steps
    mean_first_token_s: float  # mean over requests of when their prompt's last chunk finishes
    decode_s: float
    decode_step: StepTime

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.decode_s


def burst_timeline(costs: ForwardCosts, rates: GpuRates, constants: SpeedConstants, *, requests: int,
                   prompt_tokens: int, output_tokens: float, budget_tokens: int,
                   longest_output_tokens: int | None = None) -> BurstTimeline:
    """Prompts first (in steps of ``budget_tokens``), then the decode steps of the whole batch.

    With ``longest_output_tokens`` (outputs that stop early at EOS), the batch decodes for the longest output
    while it shrinks: the mean batch is requests x output / longest.
    """
    total_prompt = requests * prompt_tokens
    steps = max(1, math.ceil(total_prompt / budget_tokens))
    prefill = finished = 0.0
    first_token_sum = 0.0
    for i in range(steps):
        size = min(budget_tokens, total_prompt - i * budget_tokens)
        if prompt_tokens <= budget_tokens:  # whole prompts per step, each attending only over itself
            duration = step_time(costs, rates, constants, decode_tokens=0, decode_context_tokens=0,
                                 prefill_tokens=size, prefill_prompts=size / prompt_tokens).total_s
        else:
            start = (i * budget_tokens) % prompt_tokens
            duration = step_time(costs, rates, constants, decode_tokens=0, decode_context_tokens=0,
                                 prefill_tokens=size, prefill_start_tokens=start).total_s
        prefill += duration
        done = min(requests, math.floor((i + 1) * budget_tokens / prompt_tokens)) if i < steps - 1 else requests
        first_token_sum += (done - finished) * prefill
        finished = done
    longest = longest_output_tokens or output_tokens
    batch = requests * output_tokens / longest
    decode_step = step_time(costs, rates, constants, decode_tokens=batch,
                            decode_context_tokens=prompt_tokens + output_tokens / 2)
    decode = max(longest - 1, 0) / costs.tokens_per_decode_step * decode_step.total_s
    return BurstTimeline(requests=requests, prefill_s=prefill, mean_first_token_s=first_token_sum / requests,
                         decode_s=decode, decode_step=decode_step)
