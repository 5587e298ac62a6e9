"""Find the vLLM arguments in a pasted launch line: shell wrappers, prompts, containers and module forms (pure).

Accepted around the arguments: ``$ ``/``# `` prompts, ``sudo``, ``env X=1``, ``nohup``, ``time``, ``uv run``,
``VAR=value`` prefixes, ``python3.11 -m vllm.entrypoints.openai.api_server``, ``python -m vllm.entrypoints.cli.main
serve``, ``/path/to/vllm serve``, ``docker run [options] vllm/vllm-openai[:tag]`` (the image's entrypoint is
``vllm serve``), several commands joined by ``;``, ``&&`` or new lines, redirections and a trailing ``&``.
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, ConfigDict

from .errors import InvalidInput

_OPERATORS = frozenset({";", "&&", "||", "|", "&", ";;", "|&"})
_MODULE_SERVERS = frozenset({"vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"})
_MODULE_CLIS = frozenset({"vllm.entrypoints.cli.main", "vllm"})
# A release in a container tag: v0.8.5, 0.10.2rc2, v0.6.6.post1, v0.9.0-cu126 (the suffix after "-" is a build).
_TAG_VERSION = re.compile(r"^(v?\d+\.\d+(?:\.\d+)*(?:\.?(?:rc|post|dev|a|b)\d*)*)(?:$|[\-+_])", re.IGNORECASE)
# "> log", ">> log", "2>&1", "< input" (their targets are not vLLM arguments)
_REDIRECTION = re.compile(r"(^|\s)\d*(>>?|<)(&\d+|\s*[^\s;&|<>]+)")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# `docker run --help` (Docker 27): the options that take a value, and the flags. Podman and nerdctl share them; an
# option in neither set is refused, since only its arity says where the image name is.
_CONTAINER_VALUE_OPTIONS = frozenset({
    "--add-host", "--annotation", "-a", "--attach", "--blkio-weight", "--blkio-weight-device", "--cap-add",
    "--cap-drop", "--cgroup-parent", "--cgroupns", "--cidfile", "--cpu-count", "--cpu-percent", "--cpu-period",
    "--cpu-quota", "--cpu-rt-period", "--cpu-rt-runtime", "-c", "--cpu-shares", "--cpus", "--cpuset-cpus",
    "--cpuset-mems", "--detach-keys", "--device", "--device-cgroup-rule", "--device-read-bps", "--device-read-iops",
    "--device-write-bps", "--device-write-iops", "--dns", "--dns-option", "--dns-opt", "--dns-search", "--domainname",
    "--entrypoint", "-e", "--env", "--env-file", "--expose", "--gpus", "--group-add", "--health-cmd",
    "--health-interval", "--health-retries", "--health-start-interval", "--health-start-period", "--health-timeout",
    "-h", "--hostname", "--ip", "--ip6", "--ipc", "--isolation", "--kernel-memory", "-l", "--label", "--label-file",
    "--link", "--link-local-ip", "--log-driver", "--log-opt", "--mac-address", "-m", "--memory",
    "--memory-reservation", "--memory-swap", "--memory-swappiness", "--mount", "--name", "--network", "--net",
    "--network-alias", "--net-alias", "--oom-score-adj", "--pid", "--pids-limit", "--platform", "-p", "--publish",
    "--pull", "--restart", "--runtime", "--security-opt", "--shm-size", "--stop-signal", "--stop-timeout",
    "--storage-opt", "--sysctl", "--tmpfs", "--ulimit", "-u", "--user", "--userns", "--uts", "-v", "--volume",
    "--volume-driver", "--volumes-from", "-w", "--workdir",
    # podman's own (podman run --help, 5.x)
    "--pod", "--secret", "--hooks-dir", "--cgroup-conf", "--cgroups", "--systemd", "--tz", "--umask", "--arch",
    "--os", "--variant", "--authfile", "--creds", "--cert-dir", "--decryption-key", "--image-volume",
    "--passwd-entry", "--personality", "--preserve-fds", "--requires", "--sdnotify", "--seccomp-policy", "--timeout",
    "--uidmap", "--gidmap", "--subuidname", "--subgidname", "--chrootdirs", "--init-path", "--pidfile", "--env-merge",
})
_CONTAINER_FLAGS = frozenset({
    "-d", "--detach", "--disable-content-trust", "--help", "--init", "-i", "--interactive", "--no-healthcheck",
    "--oom-kill-disable", "--privileged", "-P", "--publish-all", "-q", "--quiet", "--read-only", "--rm",
    "--sig-proxy", "-t", "--tty", "--use-api-socket", "--replace", "--tls-verify", "--rmi", "--no-hosts",
    "--read-only-tmpfs", "--env-host", "--http-proxy",
})
NOT_A_LAUNCH_LINE = ("not a vLLM launch command: expected `vllm serve MODEL ...`, `python -m "
                     "vllm.entrypoints.openai.api_server --model MODEL ...` or `docker run ... vllm/vllm-openai ...`")


class LaunchLine(BaseModel):
    """The vLLM arguments of a launch line, and what surrounded them."""

    model_config = ConfigDict(frozen=True)
    arguments: tuple[str, ...]
    entrypoint: str  # "vllm serve", "python -m vllm.entrypoints.openai.api_server", "docker image vllm/vllm-openai"
    environment: tuple[str, ...] = ()  # VAR names set on the line (env X=1, X=1 vllm ..., docker -e X=1)
    image_version: str | None = None  # the vLLM release a container tag names (vllm/vllm-openai:v0.8.5)


def find_launch_line(text: str) -> LaunchLine:
    """The first command of ``text`` that starts vLLM; ``InvalidInput`` when none does or it cannot be read."""
    joined = re.sub(r"\\\r?\n", " ", text)
    for line in joined.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#!") or (stripped.startswith("#") and "vllm" not in stripped):
            continue
        try:
            tokens = _tokens(stripped)
        except ValueError as exc:
            raise InvalidInput(f"could not read the command: {exc}") from exc
        for command in _commands(tokens):
            found = _entrypoint(command)
            if found is not None:
                return found
    raise InvalidInput(NOT_A_LAUNCH_LINE)


def _tokens(line: str) -> list[str]:
    line = _REDIRECTION.sub(" ", line)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def _commands(tokens: list[str]) -> list[list[str]]:
    """Split at shell operators."""
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token in _OPERATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    return [command for command in commands if command]


def _entrypoint(tokens: list[str]) -> LaunchLine | None:
    environment = [t.split("=", 1)[0] for t in tokens if _ENV_NAME.match(t)]
    for index, token in enumerate(tokens):
        rest = tokens[index + 1:]
        if token.rsplit("/", 1)[-1] == "vllm" and rest[:1] == ["serve"]:
            return LaunchLine(arguments=tuple(rest[1:]), entrypoint="vllm serve", environment=tuple(environment))
        if token == "-m" and rest:
            if rest[0] in _MODULE_SERVERS:
                return LaunchLine(arguments=tuple(rest[1:]), entrypoint=f"python -m {rest[0]}",
                                  environment=tuple(environment))
            if rest[0] in _MODULE_CLIS and rest[1:2] == ["serve"]:
                return LaunchLine(arguments=tuple(rest[2:]), entrypoint=f"python -m {rest[0]} serve",
                                  environment=tuple(environment))
        if token == "run" and index > 0 and tokens[index - 1].rsplit("/", 1)[-1] in ("docker", "podman", "nerdctl"):
            return _container(rest, environment)
    return None


def _container(tokens: list[str], environment: list[str]) -> LaunchLine | None:
    """``docker run [options] IMAGE [args]``: the vLLM images run ``vllm serve`` with the arguments after them."""
    index = _image_index(tokens, environment)
    if index >= len(tokens):
        return None
    image, arguments = tokens[index], tokens[index + 1:]
    name, _, tag = image.split("@")[0].rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
    version = _TAG_VERSION.match(tag) if "vllm" in name.lower() else None
    inner = _entrypoint(arguments)  # an explicit command after the image (`... image vllm serve M`)
    if inner is not None:
        return inner.model_copy(update={"environment": tuple(dict.fromkeys((*environment, *inner.environment))),
                                        "entrypoint": f"{inner.entrypoint} in docker image {image}",
                                        "image_version": version[1] if version else None})
    if "vllm" not in name.lower():
        return None
    return LaunchLine(arguments=tuple(arguments), entrypoint=f"docker image {image}",
                      environment=tuple(dict.fromkeys(environment)),
                      image_version=version[1] if version else None)


def _image_index(tokens: list[str], environment: list[str]) -> int:
    """Where the image name is: after the options, each read with its arity (``-it``, ``-p=80:80`` and
    ``-p80:80`` included); ``InvalidInput`` for an option docker run does not have."""
    index = 0
    while index < len(tokens) and tokens[index].startswith("-"):
        option, has_value, value = tokens[index].partition("=")
        index += 1
        if option == "--":
            break
        if option in _CONTAINER_VALUE_OPTIONS:
            if not has_value:
                if index >= len(tokens):
                    raise InvalidInput(f"docker run {option} needs a value")
                value, index = tokens[index], index + 1
            if option in ("-e", "--env"):
                environment.append(value.split("=", 1)[0])
            continue
        if option in _CONTAINER_FLAGS:
            continue
        if not option.startswith("--") and len(option) > 2 and _short_cluster(tokens[index - 1]) is not None:
            takes_next, set_variable = _short_cluster(tokens[index - 1])
            if set_variable:
                environment.append(set_variable)
            if takes_next:
                if index >= len(tokens):
                    raise InvalidInput(f"docker run {option} needs a value")
                if option.endswith("e"):
                    environment.append(tokens[index].split("=", 1)[0])
                index += 1
            continue
        raise InvalidInput(f"{option!r} is not a docker run option we know, so the image name cannot be told "
                           "apart from its value: remove it from the pasted line")
    return index


def _short_cluster(token: str) -> tuple[bool, str | None] | None:
    """``-it``, ``-dp 80:80``, ``-p80:80``, ``-eX=1``: (whether the next word is a value, a variable it sets);
    None when a letter is no docker run option."""
    for position, letter in enumerate(token[1:], start=1):
        if f"-{letter}" in _CONTAINER_FLAGS:
            continue
        if f"-{letter}" not in _CONTAINER_VALUE_OPTIONS:
            return None
        attached = token[position + 1:].removeprefix("=")
        if not attached:
            return True, None
        return False, attached.split("=", 1)[0] if letter == "e" else None
    return False, None
