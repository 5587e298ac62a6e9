"""A bundled preset that can stand in for a checkpoint the Hub cannot give (offline, gated): the same model in
another precision, offered for the user to accept, never substituted silently.

    preset_stand_in("Qwen/Qwen3-30B-A3B-FP8")  -> "Qwen/Qwen3-30B-A3B"
    preset_stand_in("RedHatAI/Llama-3.1-70B-Instruct-FP8-dynamic")  -> "meta-llama/Llama-3.1-70B-Instruct"
"""

from __future__ import annotations

import re

from .model_source import preset_ids

# A quantized checkpoint's name is its model's name and a precision tag (the forms the Hub's publishers use).
PRECISION_TAG = re.compile(r"[-_.](?:fp8(?:[-_](?:dynamic|static|block))?|int[48]|w[48]a(?:8|16)|awq|"
                           r"gptq(?:[-_]int[48])?|bnb[-_]4bit|[48]bit|nvfp4|mxfp4|gguf)$", re.IGNORECASE)


def preset_stand_in(model_id: str) -> str | None:
    """The bundled preset of the same model as ``model_id`` less its precision tag (its own publisher first),
    or None when there is none or ``model_id`` carries no such tag."""
    owner, _, name = model_id.strip().rpartition("/")
    base = name
    while (shorter := PRECISION_TAG.sub("", base)) != base:
        base = shorter
    if base == name or not base:
        return None
    same = [p for p in preset_ids() if p.rpartition("/")[2].lower() == base.lower() and p != model_id]
    return next((p for p in same if p.rpartition("/")[0].lower() == owner.lower()), same[0] if same else None)
