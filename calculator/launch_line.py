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
_TAG_VERSION = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?)(?:$|[.\-+])")
# "> log", ">> log", "2>&1", "< input" (their targets are not vLLM arguments)
_REDIRECTION = re.compile(r"(^|\s)\d*(>>?|<)(&\d+|\s*[^\s;&|<>]+)")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# docker/podman run options that take a value (the first other word is the image)
_CONTAINER_VALUE_OPTIONS = frozenset({
    "-v", "--volume", "-p", "--publish", "-e", "--env", "--env-file", "--name", "--gpus", "--ipc", "--shm-size",
    "--runtime", "--network", "--net", "-w", "--workdir", "-u", "--user", "--entrypoint", "--mount", "--device",
    "--ulimit", "-l", "--label", "--cpus", "-m", "--memory", "--platform", "--restart", "-h", "--hostname",
    "--add-host", "--cap-add", "--cap-drop", "--security-opt", "--pull", "--log-driver", "--log-opt", "--tmpfs",
    "--cpuset-cpus", "--group-add", "--pid", "--uts", "--userns", "--memory-swap", "--stop-signal", "--dns",
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
    index = 0
    while index < len(tokens) and tokens[index].startswith("-"):
        option = tokens[index]
        if option in ("-e", "--env") and index + 1 < len(tokens):
            environment.append(tokens[index + 1].split("=", 1)[0])
        elif option.startswith(("-e=", "--env=")):
            environment.append(option.split("=", 2)[1])
        index += 2 if option in _CONTAINER_VALUE_OPTIONS else 1
    if index >= len(tokens):
        return None
    image, arguments = tokens[index], tokens[index + 1:]
    inner = _entrypoint(arguments)  # an explicit command after the image (`... image vllm serve M`)
    if inner is not None:
        return inner.model_copy(update={"environment": (*environment, *inner.environment)})
    name, _, tag = image.split("@")[0].rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
    if "vllm" not in name.lower():
        return None
    version = _TAG_VERSION.match(tag)
    return LaunchLine(arguments=tuple(arguments), entrypoint=f"docker image {image}", environment=tuple(environment),
                      image_version=version[1] if version else None)
