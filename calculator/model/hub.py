"""I/O edge to the Hugging Face Hub: config.json and safetensors metadata, errors mapped to ours.

The token comes from the caller or from ``HF_TOKEN`` (read by huggingface_hub itself); it is never put in an
error message, a URL we build, or a log line.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from ..errors import GatedModel, HubUnreachable, InvalidConfig, ModelNotFound
from ..limits import MAX_CONFIG_BYTES
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
                 endpoint: str | None = None, deadline_s: float = HUB_DEADLINE_S) -> dict[str, Any]:
    """Download ``config.json`` of a Hub repository (``endpoint`` for mirrors), at most ``MAX_CONFIG_BYTES``."""
    ends_at = time.monotonic() + deadline_s
    return _within_deadline(repo_id, lambda: _fetch_config(repo_id, token, revision, endpoint, ends_at), deadline_s)


def _fetch_config(repo_id: str, token: str | None, revision: str | None, endpoint: str | None,
                  ends_at: float) -> dict[str, Any]:
    """The repository's config.json, streamed and refused past ``MAX_CONFIG_BYTES``.

    NOTE: not ``hf_hub_download``: it reads a file of any size whole, and when the Hub refuses a caller (a private
    or gated repository without the right token) it answers from its disk cache whatever an earlier caller with
    the right token downloaded. Nothing here is kept on disk, so every caller's read is decided by the Hub."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    _ensure_reachable(repo_id, endpoint)
    url = hf_hub_url(repo_id, "config.json", revision=revision, endpoint=_endpoint(endpoint))
    try:
        with httpx.Client(follow_redirects=True, timeout=HUB_TIMEOUT_S) as client, \
                client.stream("GET", url, headers=build_hf_headers(token=token)) as response:
            if response.status_code >= 400:
                _refusal(repo_id, revision, response)
            length = response.headers.get("Content-Length", "")
            if length.isdigit() and int(length) > MAX_CONFIG_BYTES:
                raise InvalidConfig(_too_large(repo_id, int(length)))
            body = bytearray()
            for chunk in response.iter_bytes():
                body.extend(chunk)
                if len(body) > MAX_CONFIG_BYTES:
                    raise InvalidConfig(_too_large(repo_id, None))
                if time.monotonic() > ends_at:  # the caller has stopped waiting: so does this worker
                    raise HubUnreachable(f"the Hugging Face Hub sent the config.json of {repo_id} too slowly")
    except httpx.HTTPError as exc:  # refused, DNS, timeouts, a broken answer
        raise HubUnreachable(f"the Hugging Face Hub could not be reached for {repo_id}; pick a bundled preset or "
                             "upload its config.json") from exc
    return parse_config_text(bytes(body), repo_id)


def _refusal(repo_id: str, revision: str | None, response: httpx.Response) -> None:
    """Raise our error for the Hub's refusal, read from its ``X-Error-Code`` header as huggingface_hub does."""
    code, message = response.headers.get("X-Error-Code"), response.headers.get("X-Error-Message")
    if code == "GatedRepo":
        raise GatedModel(f"{repo_id} is gated: accept its licence on the Hub and give a token (HF_TOKEN)")
    if code == "RevisionNotFound":
        raise ModelNotFound(f"{repo_id} has no revision {revision!r}")
    if code == "EntryNotFound":
        raise InvalidConfig(f"{repo_id} has no config.json (GGUF-only or non-transformers repository?)")
    if response.status_code == 401 and message == "Invalid credentials in Authorization header":
        raise ModelNotFound(f"the Hub refused the token given for {repo_id}: check it (or leave it empty)")
    if code == "RepoNotFound" or response.status_code in (401, 404):
        raise ModelNotFound(f"no such model on the Hub: {repo_id} (or it is private: give a token)")
    raise HubUnreachable(f"the Hugging Face Hub answered HTTP {response.status_code} for {repo_id}; try again "
                         "later, pick a bundled preset or upload its config.json")


def _too_large(repo_id: str, length: int | None) -> str:
    size = f"{length / (1 << 20):,.1f} MiB" if length is not None else f"over {MAX_CONFIG_BYTES >> 20} MiB"
    return (f"the config.json of {repo_id} is {size}, larger than any config.json can be ({MAX_CONFIG_BYTES >> 20} "
            "MiB at most; published ones are under 100 KiB): it was not read")


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
