"""Seeded fuzz of pasted launch lines: each one imports with every flag accounted for, or fails with one clear line.

Bounded: 400 lines from a fixed seed, built from the wrappers people paste around vLLM (prompts, sudo, env, nohup,
uv run, docker run with its options, python3.X -m, the cli module, trailing operators and redirections), flags from
vLLM's own option table (modelled, known-but-ignored, misspelled, underscored) with valid, edge and garbage
values. For each: the import returns a scenario or raises InvalidInput (never anything else, never a multi-line
message); every flag on the line is listed as imported, ignored or unknown (nothing dropped silently); and the
exported `vllm serve` command of the result imports back to the same scenario.
"""

from __future__ import annotations

import random

import pytest

from calculator import InvalidInput
from calculator.serve_command import import_serve_command, serve_command

SEED = 7031
WRAPPERS = ["", "$ ", "sudo ", "sudo -E ", "nohup ", "env VLLM_LOGGING_LEVEL=DEBUG ", "CUDA_VISIBLE_DEVICES=0,1 ",
            "uv run ", "time ", "(venv) user@box:~$ "]
ENTRYPOINTS = ["vllm serve {m}", "/opt/venv/bin/vllm serve {m}", "python -m vllm.entrypoints.openai.api_server --model {m}",
               "python3.11 -m vllm.entrypoints.openai.api_server --model={m}", "python -m vllm.entrypoints.cli.main serve {m}",
               "docker run --gpus all -p 8000:8000 --ipc=host -v /data:/data vllm/vllm-openai:latest --model {m}",
               "docker run --runtime nvidia -e HF_TOKEN=x vllm/vllm-openai:v0.8.5 {m}"]
MODELS = ["Qwen/Qwen3-8B", "meta-llama/Llama-3.1-70B-Instruct", "./models/local", "org/name-with.dots"]
FLAGS = {  # flag -> values (valid, edge, garbage)
    "--tensor-parallel-size": ["1", "2", "8", "0", "x"], "-tp": ["2", "4"], "--pipeline-parallel-size": ["2", "1025"],
    "--data-parallel-size": ["2", "4"], "-dp": ["2"], "--gpu-memory-utilization": ["0.1", "0.9", "1", "1.5", "0"],
    "--max-model-len": ["4096", "32k", "128K", "auto", "-1", "inf", "1e3"], "--max-num-seqs": ["64", "0", "many"],
    "--max-num-batched-tokens": ["8192", "16k"], "--block-size": ["16", "32", "7"],
    "--dtype": ["auto", "half", "bfloat16", "float", "int3"], "--kv-cache-dtype": ["fp8", "auto", "fp8_e5m2"],
    "--quantization": ["fp8", "awq"], "-q": ["fp8"], "--kv-cache-memory-bytes": ["8G", "1000000000", "-5"],
    "--num-gpu-blocks-override": ["1000"], "--cpu-offload-gb": ["4", "0", "nan"],
    "--swap-space": ["16"], "--kv-offloading-size": ["64"], "--host": ["0.0.0.0"], "--port": ["8000"],
    "--served-model-name": ["m"], "--speculative-config": ["'{\"method\": \"ngram\"}'"], "--seed": ["0"],
}
BARE = ["--enforce-eager", "--enable-prefix-caching", "--no-enable-prefix-caching", "--enable-chunked-prefill",
        "--enable-expert-parallel", "-ep", "--trust-remote-code", "--disable-log-requests", "--async-scheduling",
        "--no-async-scheduling", "--enable-auto-tool-choice"]
MISSPELLED = ["--gpu-memory-utilisation 0.8", "--max-model-length 4096", "--tensor-paralel-size 2", "--kv-cache-type fp8"]
ENDINGS = ["", ";", " &", " > server.log 2>&1 &", " && echo done", " | tee log", "\n"]


def random_line(rng: random.Random) -> tuple[str, int]:
    """A launch line and how many flags it carries (each must show up in the report)."""
    parts, flags = [], 0
    for _ in range(rng.randint(0, 7)):
        roll = rng.random()
        if roll < 0.6:
            flag = rng.choice(sorted(FLAGS))
            value = rng.choice(FLAGS[flag])
            if flag.startswith("--") and rng.random() < 0.2:
                flag = "--" + flag[2:].replace("-", "_")  # vLLM reads underscores too
            parts.append(f"{flag}={value}" if rng.random() < 0.3 else f"{flag} {value}")
        elif roll < 0.9:
            parts.append(rng.choice(BARE))
        else:
            parts.append(rng.choice(MISSPELLED))
        flags += 1
    entry = rng.choice(ENTRYPOINTS).format(m=rng.choice(MODELS))
    separator = " \\\n  " if rng.random() < 0.3 else " "
    return rng.choice(WRAPPERS) + separator.join([entry, *parts]) + rng.choice(ENDINGS), flags


@pytest.mark.parametrize("batch", range(8))
def test_launch_lines_import_with_every_flag_accounted_for_or_fail_clearly(batch):
    rng = random.Random(SEED + batch)
    imported = 0
    for _ in range(50):
        line, flags = random_line(rng)
        try:
            scenario, report = import_serve_command(line)
        except InvalidInput as exc:
            assert "\n" not in str(exc) and str(exc), line
            continue
        imported += 1
        listed = len(report.imported) + len(report.ignored) + len(report.unknown)
        listed -= sum(1 for i in report.imported if i.startswith(("--model ", "vLLM ")))
        listed -= sum(1 for i in report.ignored if i.startswith("environment variable"))
        assert listed == flags, (line, report)
        again, _ = import_serve_command(serve_command(scenario), base=scenario)
        assert again == scenario, (line, serve_command(scenario))
    assert imported >= 15  # the campaign must exercise the success path too


@pytest.mark.parametrize("text", ["", "   ", "vllm", "serve", "docker run ubuntu bash", "vllm serve", "'", "\\",
                                  "vllm serve m --max-model-len", "python -m vllm", "ls -la; echo vllm serve"])
def test_hopeless_lines_fail_with_one_clear_line(text):
    with pytest.raises(InvalidInput) as caught:
        import_serve_command(text)
    assert "\n" not in str(caught.value)
