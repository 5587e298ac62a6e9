"""Seeded mutations of real config.json files, as an attacker or a careless user would produce them.

Each case carries the bytes to upload and, where the mutation touched one field, that field's name, so a refusal
can be checked for naming it. The same seed gives the same cases on every machine.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

HOSTILE_VALUES: tuple[Any, ...] = (
    0, -1, 1.5, 1e18, 10**9, 10**12, 2**63, 2**70, "x", "4096", "", None, True, False, [], {}, [1], {"a": 1},
    -(10**9), 1e-300, 4096.0, "Infinity", "\u202e\u0000",
)
HUGE_DIMENSIONS: tuple[Any, ...] = (10**9, 10**12, 10**18, 2**63, 2**70, 1e18, 1e300, -1, 0, 3.5)
# Fields whose absurd values exhausted memory or divided by zero in issue 10's campaign.
DIMENSIONS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size",
              "intermediate_size", "head_dim", "max_position_embeddings", "sliding_window", "num_experts",
              "num_local_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
              "kv_lora_rank", "qk_rope_head_dim", "first_k_dense_replace", "sliding_window_pattern",
              "attention_chunk_size", "image_size", "patch_size", "group_size", "bits")


@dataclass(frozen=True)
class Mutation:
    description: str
    data: bytes
    field: str | None = None  # the key the mutation changed, when it changed one


def base_configs() -> list[tuple[str, dict[str, Any]]]:
    folder = resources.files("calculator") / "data" / "presets"
    entries = sorted((e for e in folder.iterdir() if e.name.endswith(".json")), key=lambda e: e.name)
    return [(e.name, json.loads(e.read_text())) for e in entries]


def mutations(seed: int, count: int) -> list[Mutation]:
    rng = random.Random(seed)
    bases = base_configs()
    operators = (_set_field, _set_field, _blow_up_dimension, _blow_up_dimension, _delete_field, _swap_type,
                 _text_level)
    cases = []
    for _ in range(count):
        name, config = rng.choice(bases)
        cases.append(rng.choice(operators)(rng, name, json.loads(json.dumps(config))))
    return cases


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:4]):
            yield (*prefix, index)
            yield from _paths(item, (*prefix, index))


def _parent(config: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        config = config[step]
    return config


def _named(path: tuple[Any, ...]) -> str | None:
    keys = [step for step in path if isinstance(step, str)]
    return keys[-1] if keys else None


def _dump(config: Any) -> bytes:
    # NOTE: Python writes inf/nan as Infinity/NaN, which is exactly the hostile JSON we want to send.
    return json.dumps(config).encode()


def _set_field(rng: random.Random, name: str, config: dict[str, Any]) -> Mutation:
    path = rng.choice(list(_paths(config)))
    value = rng.choice(HOSTILE_VALUES)
    if value == "Infinity":
        value = rng.choice((float("inf"), float("-inf"), float("nan")))
    _parent(config, path)[path[-1]] = value
    return Mutation(f"{name}: {'.'.join(map(str, path))} = {value!r}", _dump(config), _named(path))


def _blow_up_dimension(rng: random.Random, name: str, config: dict[str, Any]) -> Mutation:
    present = [p for p in _paths(config) if p and p[-1] in DIMENSIONS]
    path = rng.choice(present) if present else (rng.choice(DIMENSIONS),)
    value = rng.choice(HUGE_DIMENSIONS)
    _parent(config, path)[path[-1]] = value
    return Mutation(f"{name}: {'.'.join(map(str, path))} = {value!r}", _dump(config), _named(path))


def _delete_field(rng: random.Random, name: str, config: dict[str, Any]) -> Mutation:
    path = rng.choice([p for p in _paths(config) if isinstance(p[-1], str)])
    del _parent(config, path)[path[-1]]
    return Mutation(f"{name}: without {'.'.join(map(str, path))}", _dump(config), _named(path))


def _swap_type(rng: random.Random, name: str, config: dict[str, Any]) -> Mutation:
    path = rng.choice(list(_paths(config)))
    parent = _parent(config, path)
    old = parent[path[-1]]
    parent[path[-1]] = (list(old.values()) if isinstance(old, dict) else {"0": old} if isinstance(old, list)
                        else str(old) if isinstance(old, int | float) else [old])
    return Mutation(f"{name}: {'.'.join(map(str, path))} changed type", _dump(config), _named(path))


def _text_level(rng: random.Random, name: str, config: dict[str, Any]) -> Mutation:
    data = _dump(config)
    kind = rng.choice(("truncate", "bad_utf8", "brackets", "deep_objects", "bom", "non_object", "giant_int",
                       "non_finite", "flip_byte", "empty", "duplicate_key"))
    if kind == "truncate":
        data = data[: rng.randrange(len(data))]
    elif kind == "bad_utf8":
        at = rng.randrange(len(data))
        data = data[:at] + bytes([rng.choice((0x80, 0xC3, 0xFF, 0xFE))]) + data[at:]
    elif kind == "brackets":
        data = b"[" * rng.choice((100, 1000, 10_000, 100_000))
    elif kind == "deep_objects":
        depth = rng.choice((40, 500, 5000))
        data = data[:-1] + b', "deep": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"
    elif kind == "bom":
        data = "\ufeff".encode() + data
    elif kind == "non_object":
        data = rng.choice((b"[]", b"null", b"42", b'"config"', b"true"))
    elif kind == "giant_int":
        data = data[:-1] + b', "vocab_size": ' + b"7" * rng.choice((400, 5000)) + b"}"
    elif kind == "non_finite":
        literal = rng.choice((b"Infinity", b"-Infinity", b"NaN", b"1e400"))
        data = data[:-1] + b', "hidden_size": ' + literal + b"}"  # the last of two equal keys wins
    elif kind == "flip_byte":
        at = rng.randrange(len(data))
        data = data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1:]
    elif kind == "empty":
        data = rng.choice((b"", b" ", b"\n"))
    elif kind == "duplicate_key":
        data = data[:-1] + b', "num_hidden_layers": 1000000000}'
    field = {"non_finite": "hidden_size", "giant_int": "vocab_size", "duplicate_key": "num_hidden_layers"}.get(kind)
    return Mutation(f"{name}: text {kind}", data, field)
