"""Seeded fuzz of pasted logs: every mutation of the kept start-up logs ends in a diagnosis or one sentence.

Bounded: 200 pastes from a fixed seed, each a kept log (real CPU servers and the records' lines) with one to four
lines vLLM could not have printed inserted (values out of every range, negative or absurd memory, an unmodelled
version, a NUL byte), and a third of them shuffled. Each must give a Diagnosis or raise a CalculatorError whose
message is one line; nothing else (a ValidationError, a ValueError, a traceback on the page).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from calculator.errors import CalculatorError
from calculator.observe.diagnose import diagnose_text

LOGS = sorted((Path(__file__).parent / "data" / "vllm-startup-logs").rglob("*.log"))
TINY_LLAMA = str(Path(__file__).parent / "data" / "tiny-configs" / "tiny-llama.config.json")
ODD_LINES = (
    "INFO non-default args: {'gpu_memory_utilization': abc, 'max_model_len': 99999999999999}",
    "INFO non-default args: {'tensor_parallel_size': 0, 'block_size': 7, 'max_num_seqs': 0}",
    "INFO non-default args: {'dtype': 'int3', 'kv_cache_dtype': 'fp9', 'data_parallel_size': 99999}",
    "INFO Available KV cache memory: -99999 GiB", "INFO # GPU blocks: 0, # CPU blocks: 0",
    "INFO # GPU blocks: 99999999999, # CPU blocks: 0", "INFO Model loading took 99999.5 GiB",
    "INFO Maximum concurrency for 0 tokens per request: 0.00x", "INFO vLLM API server version 0.2.4",
    "INFO vLLM API server version 9.9.9", "Free memory on device (0/0 GiB) on startup", "\x00",
    "INFO model weights take 999999GiB; non_torch_memory takes 0.1GiB; PyTorch activation peak memory takes 1GiB; "
    "the rest of the memory reserved for KV Cache is -999999GiB.",
    "INFO Explicitly set (5000.0/1.0) GiB for KV cache on node 0.",
    "INFO GPU KV cache size: 999,999,999,999,999,999 tokens",
)


@pytest.mark.parametrize("seed", range(4))
def test_mutated_logs_give_a_diagnosis_or_one_sentence(seed: int):
    rng = random.Random(seed)
    texts = [path.read_text() for path in LOGS]
    for _ in range(50):
        lines = rng.choice(texts).splitlines()
        for _ in range(rng.randint(1, 4)):
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(ODD_LINES))
        if rng.random() < 0.3:
            rng.shuffle(lines)
        try:
            diagnose_text("\n".join(lines), gpu=rng.choice(["h100-sxm-80gb", None]), model=TINY_LLAMA,
                          vllm_version=rng.choice([None, "0.11.0"]))
        except CalculatorError as exc:
            assert "\n" not in str(exc).strip(), str(exc)
