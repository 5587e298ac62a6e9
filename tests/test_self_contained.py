"""A clone alone runs every test: no test or benchmark reads the team's ``shared/`` folder beside the checkout."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# A path into the team folder beside the checkout: `... / "shared" / ...` or a literal "../shared".
OUTSIDE_PATH = re.compile(r"\.\./shared|/ \"shared\"")


def test_no_test_or_benchmark_reads_outside_the_checkout() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for folder in ("tests", "benchmarks", "calculator", "pages")
        for path in sorted((REPO / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if OUTSIDE_PATH.search(line) and not line.lstrip().startswith("#")
    ]
    assert offenders == []


def test_the_copied_facts_are_in_the_checkout() -> None:
    index = (REPO / "tests" / "data" / "configs" / "INDEX.md").read_text(encoding="utf-8")
    calibration = (REPO / "benchmarks" / "data" / "calibration.jsonl").read_text(encoding="utf-8")
    later = (REPO / "benchmarks" / "data" / "calibration-2026-12.jsonl").read_text(encoding="utf-8")
    assert "Llama-3.1-8B-Instruct" in index
    assert len(calibration.splitlines()) == 47
    assert len(later.splitlines()) == 22
