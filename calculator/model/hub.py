"""I/O edge to the Hugging Face Hub: config.json and safetensors metadata, errors mapped to ours.

The token comes from the caller or from ``HF_TOKEN`` (read by huggingface_hub itself); it is never put in an
error message, a URL we build, or a log line.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ..errors import GatedModel, HubUnreachable, InvalidConfig, ModelNotFound
from .config_json import parse_config_text

HUB_TIMEOUT_S = 10.0
REACHABILITY_TIMEOUT_S = 3.0  # huggingface_hub retries with backoff (~25 s); a person should not wait that long
HUB_DEADLINE_S = 20.0  # one wall-clock bound on a whole Hub read: look-up, connect, headers, body and retries
# NOTE: huggingface_hub's timeouts bound each socket operation, so an endpoint that trickles its headers a byte a
# second is never cut off by them. The read runs on a worker and the caller stops waiting at the deadline; a worker
# stuck on such a socket ends when huggingface_hub's own per-read timeout fires.
_HUB_WORKERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="hub")
T = TypeVar("T")


def _within_deadline(repo_id: str, read: Callable[[], T], deadline_s: float) -> T:
    """``read()``, or HubUnreachable when it has not finished within ``deadline_s`` seconds."""
    future = _HUB_WORKERS.submit(read)
    try:
        return future.result(timeout=deadline_s)
    except FutureTimeout as exc:
        future.cancel()
        raise HubUnreachable(f"the Hugging Face Hub did not answer for {repo_id} within {deadline_s:g} s; pick a "
                             "bundled preset or upload its config.json") from exc


def _endpoint(endpoint: str | None) -> str | None:
    """An explicit endpoint, else HF_ENDPOINT as set now (huggingface_hub only reads it once, at import)."""
    return endpoint or os.environ.get("HF_ENDPOINT") or None


def _ensure_reachable(repo_id: str, endpoint: str | None) -> None:
    """Check the id's shape, then fail fast when nothing listens at the Hub endpoint (offline, firewall)."""
    from huggingface_hub import constants
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise ModelNotFound(f"{repo_id!r} is not a valid Hub model id (expected org/name)") from exc

    if constants.HF_HUB_OFFLINE:
        raise HubUnreachable(f"HF_HUB_OFFLINE is set, so {repo_id} cannot be read from the Hub; pick a bundled "
                             "preset or upload its config.json")
    parts = urlsplit(_endpoint(endpoint) or constants.ENDPOINT)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=REACHABILITY_TIMEOUT_S).close()
    except OSError as exc:
        raise HubUnreachable(f"the Hugging Face Hub could not be reached for {repo_id}; pick a bundled preset or "
                             "upload its config.json") from exc


def fetch_config(repo_id: str, *, token: str | None = None, revision: str | None = None,
                 endpoint: str | None = None, cache_dir: str | None = None,
                 deadline_s: float = HUB_DEADLINE_S) -> dict[str, Any]:
    """Download ``config.json`` of a Hub repository (cached by huggingface_hub; ``endpoint`` for mirrors)."""
    return _within_deadline(repo_id, lambda: _fetch_config(repo_id, token, revision, endpoint, cache_dir),
                            deadline_s)


def _fetch_config(repo_id: str, token: str | None, revision: str | None, endpoint: str | None,
                  cache_dir: str | None) -> dict[str, Any]:
    import huggingface_hub
    from huggingface_hub import errors as hub_errors

    _ensure_reachable(repo_id, endpoint)
    try:
        path = huggingface_hub.hf_hub_download(repo_id, "config.json", revision=revision, token=token,
                                               etag_timeout=HUB_TIMEOUT_S, endpoint=_endpoint(endpoint),
                                               cache_dir=cache_dir)
    except (hub_errors.LocalEntryNotFoundError, hub_errors.OfflineModeIsEnabled) as exc:
        # NOTE: before EntryNotFoundError: a local cache miss while offline is its subclass too.
        raise HubUnreachable(f"the Hugging Face Hub could not be reached for {repo_id}; pick a bundled preset or "
                             "upload its config.json") from exc
    except hub_errors.GatedRepoError as exc:  # before RepositoryNotFoundError: it is a subclass
        raise GatedModel(f"{repo_id} is gated: accept its licence on the Hub and give a token (HF_TOKEN)") from exc
    except hub_errors.RepositoryNotFoundError as exc:
        raise ModelNotFound(f"no such model on the Hub: {repo_id} (or it is private: give a token)") from exc
    except hub_errors.RevisionNotFoundError as exc:
        raise ModelNotFound(f"{repo_id} has no revision {revision!r}") from exc
    except hub_errors.EntryNotFoundError as exc:
        raise InvalidConfig(f"{repo_id} has no config.json (GGUF-only or non-transformers repository?)") from exc
    except hub_errors.HFValidationError as exc:
        raise ModelNotFound(f"{repo_id!r} is not a valid Hub model id (expected org/name)") from exc
    except OSError as exc:  # connection refused, DNS failure, timeouts, 5xx
        raise HubUnreachable(f"the Hugging Face Hub could not be reached for {repo_id}; pick a bundled preset or "
                             "upload its config.json") from exc
    with open(path, encoding="utf-8") as handle:
        return parse_config_text(handle.read(), repo_id)


def fetch_safetensors_parameter_count(repo_id: str, *, token: str | None = None, endpoint: str | None = None,
                                      deadline_s: float = HUB_DEADLINE_S) -> dict[str, int] | None:
    """Parameters per stored dtype from the safetensors headers (``{"BF16": 8030261248}``), or None."""
    return _within_deadline(repo_id, lambda: _fetch_parameter_count(repo_id, token, endpoint), deadline_s)


def _fetch_parameter_count(repo_id: str, token: str | None, endpoint: str | None) -> dict[str, int] | None:
    from huggingface_hub import HfApi
    from huggingface_hub import errors as hub_errors

    _ensure_reachable(repo_id, endpoint)
    try:
        metadata = HfApi(endpoint=_endpoint(endpoint), token=token).get_safetensors_metadata(repo_id, timeout=HUB_TIMEOUT_S)
    except hub_errors.GatedRepoError as exc:
        raise GatedModel(f"{repo_id} is gated: accept its licence on the Hub and give a token (HF_TOKEN)") from exc
    except (hub_errors.RepositoryNotFoundError, hub_errors.NotASafetensorsRepoError, hub_errors.SafetensorsParsingError,
            json.JSONDecodeError):
        return None
    except OSError as exc:
        raise HubUnreachable(f"the Hugging Face Hub could not be reached for {repo_id}") from exc
    return dict(metadata.parameter_count)
