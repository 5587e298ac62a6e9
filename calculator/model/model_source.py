"""Where a model's config.json comes from: a bundled preset, a file or folder, or the Hugging Face Hub.

The I/O edge for model facts. Presets resolve offline by their Hub id (``meta-llama/Llama-3.1-8B-Instruct``).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InvalidConfig, ModelNotFound
from ..limits import MAX_CONFIG_BYTES, MAX_MODEL_REFERENCE_CHARS
from .architecture import build_model_spec
from .config_json import parse_config_text
from .spec import ModelSpec


def _preset_files() -> dict[str, Any]:
    folder = resources.files("calculator") / "data" / "presets"
    return {entry.name[: -len(".json")].replace("__", "/", 1): entry
            for entry in folder.iterdir() if entry.name.endswith(".json")}


@lru_cache(maxsize=1)
def preset_ids() -> tuple[str, ...]:
    """Hub ids of every bundled preset, sorted case-insensitively."""
    return tuple(sorted(_preset_files(), key=str.lower))


def _preset_lookup(model: str) -> Any | None:
    files = _preset_files()
    if model in files:
        return files[model]
    lowered = {key.lower(): value for key, value in files.items()}
    return lowered.get(model.lower())


def load_config(model: str) -> tuple[dict[str, Any], str]:
    """The raw config and a source label ("preset", "file" or "hub") for an id, file or folder."""
    if not model.strip():
        raise ModelNotFound("no model given: name a Hub id, a preset, a config.json or a model folder")
    if len(model) > MAX_MODEL_REFERENCE_CHARS:
        raise ModelNotFound(f"a model reference of {len(model):,} characters is not a Hub id, preset or path "
                            f"(at most {MAX_MODEL_REFERENCE_CHARS:,})")
    preset = _preset_lookup(model)
    if preset is not None:
        return parse_config_text(preset.read_bytes(), model), "preset"
    local = _local_config_file(model)
    if local is not None:
        return parse_config_text(_read_bounded(local, model), str(local)), "file"
    if model.endswith(".json") or model.startswith(("/", "./", "~")):
        raise ModelNotFound(f"no such file: {_shown(model)}")
    from .hub import fetch_config  # I/O edge, imported only when the Hub is needed

    return fetch_config(model), "hub"


def _local_config_file(model: str) -> Path | None:
    """The config.json a path names (a file, or a folder holding one); None when it names nothing on disk."""
    try:
        path = Path(model).expanduser()
        if path.is_dir():
            path = path / "config.json"
            if not path.is_file():
                raise ModelNotFound(f"{_shown(model)} is a folder without a config.json")
        return path if path.is_file() else None
    except (OSError, RuntimeError) as exc:  # a name too long for the file system, a loop of links, no home folder
        if model.endswith(".json") or model.startswith(("/", "./", "~")):
            raise ModelNotFound(f"cannot read {_shown(model)}: {getattr(exc, 'strerror', None) or exc}") from exc
        return None  # not a usable path: try it as a Hub id


def _read_bounded(path: Path, model: str) -> bytes:
    """The file's bytes, refusing a file too large to be a config.json before reading it."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ModelNotFound(f"cannot read {_shown(model)}: {getattr(exc, 'strerror', None) or exc}") from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise InvalidConfig(f"{_shown(model)}: larger than {MAX_CONFIG_BYTES >> 20} MiB, so not a config.json")
    return data


def _shown(model: str) -> str:
    return model if len(model) <= 80 else f"{model[:77]}..."


@lru_cache(maxsize=256)
def load_model_spec(model: str) -> ModelSpec:
    """A ``ModelSpec`` for a preset id, a config.json path, a model folder, or (online) any Hub id."""
    config, _ = load_config(model)
    return build_model_spec(config, model_id=model)


def model_spec_from_text(text: str | bytes, model_id: str = "uploaded config.json") -> ModelSpec:
    """A ``ModelSpec`` from config.json text or the raw bytes of an upload (which must be UTF-8)."""
    return build_model_spec(parse_config_text(text, model_id), model_id=model_id)


_SAFETENSORS_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


def hub_model_spec(repo_id: str, *, token: str | None = None, endpoint: str | None = None) -> ModelSpec:
    """A Hub model's spec from its config.json, with the exact stored parameter count from safetensors headers."""
    from .hub import fetch_config, fetch_safetensors_parameter_count

    spec = build_model_spec(fetch_config(repo_id, token=token, endpoint=endpoint), model_id=repo_id)
    counts = fetch_safetensors_parameter_count(repo_id, token=token, endpoint=endpoint)
    if not counts:
        return spec
    dominant = max(counts, key=counts.__getitem__)
    return spec.model_copy(update={
        "checkpoint_num_params": sum(counts.values()),
        "config_dtype": spec.config_dtype or _SAFETENSORS_DTYPES.get(dominant),
    })
