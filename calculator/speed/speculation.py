"""Where speculative decoding stops paying: the concurrency above which the same deployment without it decodes
faster.

Each step verifies ``k`` proposals per request and runs the drafter ``k`` times; at low concurrency the step is
bound by streaming the weights, so the extra tokens are nearly free and a request gains the accepted ones. As the
batch grows the step turns compute-bound, the ``k + 1`` query tokens per request cost their FLOPs, and the gain
turns into a loss (vLLM's own guidance: speculative decoding helps latency at low QPS).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..engine.estimate import Estimate, estimate
from ..errors import CalculatorError
from .predict import speed_estimate
from .traffic import Traffic


class SpeculationGain(BaseModel):
    """TPOT with and without speculative decoding at each concurrency tried (powers of two up to max_num_seqs)."""

    model_config = ConfigDict(frozen=True)
    concurrency: tuple[int, ...]
    tpot_ms: tuple[float, ...]  # with speculative decoding
    tpot_without_ms: tuple[float, ...]  # the same deployment without it (its KV pool holds more tokens)
    pays_up_to: int | None  # the concurrency up to which it lowers TPOT at every step tried; None: not even at 1


def speculation_gain(result: Estimate, traffic: Traffic) -> SpeculationGain | None:
    """How TPOT with ``result``'s speculative decoding compares with none (None: ``result`` has none)."""
    if result.proposer is None:
        return None
    plain = estimate(result.scenario.replace(speculative_method=None, speculative_model=None,
                                             num_speculative_tokens=None, draft_tensor_parallel_size=None,
                                             speculative_acceptance_rate=None), result.model)
    tried, with_spec, without = [], [], []
    users = 1
    while users <= result.settings.max_num_seqs:
        load = traffic.model_copy(update={"concurrency": users, "request_rate": None})
        try:
            ours, theirs = speed_estimate(result, load), speed_estimate(plain, load)
        except CalculatorError:
            break
        if min(ours.concurrency.served, theirs.concurrency.served) < users:
            break  # NOTE: past what either KV cache holds, the two serve different batches: no like-for-like
        tried.append(users)
        with_spec.append(ours.tpot_ms)
        without.append(theirs.tpot_ms)
        users *= 2
    pays_up_to = None
    for users, ours_ms, theirs_ms in zip(tried, with_spec, without):
        if ours_ms >= theirs_ms:
            break
        pays_up_to = users
    return SpeculationGain(concurrency=tuple(tried), tpot_ms=tuple(with_spec), tpot_without_ms=tuple(without),
                           pays_up_to=pays_up_to)


def speculation_summary(gain: SpeculationGain | None) -> dict[str, object]:
    """The JSON fields of ``gain`` ({} without speculative decoding)."""
    if gain is None:
        return {}
    return {"speculation_pays_up_to_concurrency": gain.pays_up_to,
            "speculation_tpot_ms_by_concurrency": {str(c): [round(ours, 3), round(theirs, 3)] for c, ours, theirs
                                                   in zip(gain.concurrency, gain.tpot_ms, gain.tpot_without_ms)}}


def speculation_sentence(gain: SpeculationGain) -> str:
    """Where speculation stops paying, as the end of a sentence that names it (CLI and Plan page)."""
    if gain.pays_up_to is None:
        return "does not lower TPOT at any concurrency tried: turn it off"
    return (f"lowers TPOT up to {gain.pays_up_to:,} concurrent requests; above that the same deployment without it "
            "decodes faster")


def speculation_text(gain: SpeculationGain | None) -> str:
    """One line for the text output ("" without speculative decoding)."""
    return "" if gain is None else f"\nspeculation  {speculation_sentence(gain)}"
