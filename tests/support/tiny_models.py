"""Tiny random models, built offline, that a real vLLM CPU server can load.

Two halves, one file:

* a script run with the vLLM venv's interpreter (it has torch and transformers)::

      VENV/bin/python tests/support/tiny_models.py --config tests/data/tiny-configs/tiny-llama.config.json --out DIR

  It writes ``DIR/config.json``, seeded random weights as ``model.safetensors`` and a byte-level BPE
  tokenizer trained on generated text, saved as a transformers tokenizer. ``--config``/``--out``
  may repeat, to build several models in one process (importing torch is most of the ~8 s);
* :func:`build_tiny_models`, which the tests (system interpreter, no torch) call to run that script.

Recipe: shared/research/vllm-on-cpu.md, section 3.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

TINY_CONFIGS_DIR = Path(__file__).resolve().parents[1] / "data" / "tiny-configs"
SEED = 0
BUILD_TIMEOUT_S = 300

# NOTE: ids 0-3 in this order; the tiny configs name bos 1, eos 2, pad 3.
_SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]
# NOTE: vLLM's gpt-oss reasoning parser (0.19) looks these harmony tokens up in the vocabulary at start-up.
_MODEL_SPECIAL_TOKENS = {"gpt_oss": ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"]}
_WORDS = (
    "the quick brown fox jumps over lazy dog hello world vllm metrics cache server "
    "request token model prompt answer question user assistant system"
).split()
_CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>\n"
    "{% endfor %}{% if add_generation_prompt %}<s>assistant: {% endif %}"
)


class TinyModelBuildError(RuntimeError):
    """The builder script failed; the message carries its output."""


def tiny_config_path(name: str) -> Path:
    """``tests/data/tiny-configs/<name>.config.json``, e.g. ``tiny_config_path("tiny-llama")``."""
    path = TINY_CONFIGS_DIR / f"{name}.config.json"
    if not path.is_file():
        known = sorted(p.name.removesuffix(".config.json") for p in TINY_CONFIGS_DIR.glob("*.config.json"))
        raise FileNotFoundError(f"no tiny config {path}; known: {', '.join(known)}")
    return path


def build_tiny_models(venv: Path, builds: dict[Path, Path]) -> None:
    """Run this file as a script with ``venv``'s interpreter, building ``{out_dir: config_path}``.

    One process builds them all. Raises :class:`TinyModelBuildError` with the script's output.
    """
    if not builds:
        return
    scratch = next(iter(builds)).parent / ".hf-home"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(scratch),  # keep transformers from writing under ~/.cache
        "DO_NOT_TRACK": "1",
    }
    cmd = [str(Path(venv) / "bin" / "python"), str(Path(__file__).resolve())]
    for out_dir, config_path in builds.items():
        cmd += ["--config", str(config_path), "--out", str(out_dir)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if result.returncode != 0:
        raise TinyModelBuildError(
            f"building tiny models failed (exit {result.returncode}):\n"
            f"$ {' '.join(cmd)}\n{result.stdout}{result.stderr}"
        )


class TinyModelFactory:
    """Tiny models by config name, built once each under ``root`` (a per-test-run folder)."""

    def __init__(self, venv: Path, root: Path) -> None:
        self.venv = Path(venv)
        self.root = Path(root)

    def __call__(self, name: str) -> Path:
        """The model folder for ``tests/data/tiny-configs/<name>.config.json``, built if needed."""
        self.prebuild([name])
        return self.root / name

    def prebuild(self, names) -> None:
        """Build every missing model of ``names`` in one process (saves ~8 s per model)."""
        missing = {self.root / name: tiny_config_path(name) for name in sorted(set(names))
                   if not (self.root / name / "config.json").is_file()}
        build_tiny_models(self.venv, missing)


# --- the script half: runs inside the vLLM venv -------------------------------------------------


def _train_tokenizer(model_max_length: int, extra_special_tokens: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [" ".join(_WORDS[(i * 7 + j) % len(_WORDS)] for j in range(12)) for i in range(2000)]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=_SPECIAL_TOKENS + extra_special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        pad_token="<pad>", model_max_length=model_max_length,
    )
    if extra_special_tokens:
        hf_tokenizer.add_special_tokens({"additional_special_tokens": extra_special_tokens})
    hf_tokenizer.chat_template = _CHAT_TEMPLATE
    return hf_tokenizer


def _build(config_path: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    source = json.loads(config_path.read_text())
    tokenizer = _train_tokenizer(source.get("max_position_embeddings", 4096),
                                 _MODEL_SPECIAL_TOKENS.get(source.get("model_type"), []))
    # NOTE: the embedding must cover the trained vocabulary; the configs were written with this
    # tokenizer (363 tokens), so this normally changes nothing.
    vocab_size = max(source["vocab_size"], len(tokenizer))
    config = AutoConfig.for_model(**{**source, "vocab_size": vocab_size})

    torch.manual_seed(SEED)
    try:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    except TypeError:  # NOTE: transformers < 4.56 (the venvs of older vLLM versions) names it torch_dtype
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)

    saved = json.loads((out_dir / "config.json").read_text())
    changed = {k: (v, saved.get(k)) for k, v in source.items()
               if k not in ("vocab_size", "transformers_version") and saved.get(k) != v}
    if changed:  # the capacity tests read config.json: it must be the config that was asked for
        # NOTE: an older transformers (the venvs of older vLLM versions) writes some keys its own way; the server
        # and the prediction both read this file, so it gets the requested keys back.
        (out_dir / "config.json").write_text(json.dumps({**saved, **source, "vocab_size": vocab_size}, indent=2))
    params = sum(p.numel() for p in model.parameters())
    print(f"built {type(model).__name__} ({params} parameters, vocab {vocab_size}) in {out_dir}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, action="append", required=True,
                        help="a config.json to instantiate (repeatable)")
    parser.add_argument("--out", type=Path, action="append", required=True,
                        help="folder to write that model into (one per --config)")
    args = parser.parse_args(argv)
    if len(args.config) != len(args.out):
        parser.error("give one --out per --config")
    for config_path, out_dir in zip(args.config, args.out):
        _build(config_path, out_dir)


if __name__ == "__main__":
    sys.exit(main())
