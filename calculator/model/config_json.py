"""Parse config.json text into a dict, with a clear error instead of a JSON traceback."""

from __future__ import annotations

import json
from typing import Any

from ..errors import InvalidConfig


def parse_config_text(text: str, origin: str) -> dict[str, Any]:
    """Parse config.json text; a clear ``InvalidConfig`` instead of a JSON traceback."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidConfig(f"{origin}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc
    if not isinstance(config, dict):
        raise InvalidConfig(f"{origin}: config.json must be a JSON object, not {type(config).__name__}")
    return config
