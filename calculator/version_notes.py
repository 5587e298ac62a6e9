"""What a page or an import says about a vLLM version beyond the ones modelled (pure)."""

from __future__ import annotations

from .engine.vllm_versions import LATEST_VERSION, VllmVersion


def version_warning(version: str) -> str | None:
    """Why a vLLM version's figures may not be exact: newer than any we model (its rules are the newest's)."""
    parsed, newest = VllmVersion.parse(version), VllmVersion.parse(LATEST_VERSION)
    if (parsed.major, parsed.minor) > (newest.major, newest.minor):
        return (f"vLLM {parsed} is newer than the newest version modelled ({newest}): "
                f"the figures use {newest}'s rules")
    return None
