#!/usr/bin/env bash
# Regenerate the lock files: requirements/test.lock (the app, the test extras and everything they pull in) and
# requirements/app.lock (the app alone, the same versions). Each is what resolves today for pyproject.toml,
# installed into a throwaway venv and frozen. `make`, the Dockerfile and CI install with them as constraints.
#
#   usage: scripts/lock.sh      (or `make lock`); then review `git diff requirements/`, run `make test`, commit.
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
