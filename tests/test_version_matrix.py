"""The version-matrix benchmark's table lands in docs/accuracy.md and survives the accuracy report's regeneration."""

from __future__ import annotations

from pathlib import Path

from support.vllm_cases import CASES_BY_ID

from benchmarks import version_matrix
from benchmarks.accuracy_report import with_version_matrix
from benchmarks.version_matrix import END_MARKER, START_MARKER, Row, markdown, write_docs
from calculator.engine.vllm_versions import PROVEN_VERSIONS

DOCS = Path(__file__).resolve().parents[1] / "docs" / "accuracy.md"


def test_the_table_says_what_each_side_reported_and_whether_they_match():
    rows = [Row("0.28.0", CASES_BY_ID["mistral-sliding-window"], "block 16, 65,536 blocks", "block 16, 65,536 blocks",
                ()),
            Row("0.8.5", CASES_BY_ID["gptoss-sinks-moe"], "not built: no GptOss", "-", (), applicable=False),
            Row("0.10.2", CASES_BY_ID["llama"], "block 128", "block 16", ("block_size: vLLM 128, ours 16",))]
    assert markdown(rows).splitlines()[2:] == [
        "| 0.28.0 | mistral-sliding-window | block 16, 65,536 blocks | block 16, 65,536 blocks | yes |",
        "| 0.8.5 | gptoss-sinks-moe | not built: no GptOss | - | n/a |",
        "| 0.10.2 | llama | block 128 | block 16 | **no**: block_size: vLLM 128, ours 16 |",
    ]


def test_a_run_replaces_its_versions_rows_and_keeps_the_others_and_the_report_keeps_the_block(tmp_path, monkeypatch):
    docs = tmp_path / "accuracy.md"
    docs.write_text(f"# Accuracy\n\nold text\n\n{START_MARKER}\n| vLLM | case | vLLM reported | we predict | match |\n"
                    "|---|---|---|---|---|\n| 0.19.1 | llama | old | old | yes |\n"
                    f"| 0.8.5 | llama | kept | kept | yes |\n{END_MARKER}\n\ntail\n")
    monkeypatch.setattr(version_matrix, "DOCS", docs)
    write_docs([Row("0.19.1", CASES_BY_ID["llama"], "new", "new", ()),
                Row("0.28.0", CASES_BY_ID["llama"], "added", "added", ())])
    text = docs.read_text()
    assert text.startswith("# Accuracy\n\nold text\n\n") and text.endswith("\n\ntail\n")
    rows = [line for line in text.splitlines() if line.startswith("| 0.")]
    assert rows == ["| 0.28.0 | llama | added | added | yes |", "| 0.19.1 | llama | new | new | yes |",
                    "| 0.8.5 | llama | kept | kept | yes |"]
    assert "(here: 0.28.0, 0.19.1, 0.8.5)" in text
    regenerated = with_version_matrix("# Accuracy\n\nnew report\n", text)
    assert regenerated.startswith("# Accuracy\n\nnew report\n\n")
    assert regenerated.count(START_MARKER) == 1 and "| 0.19.1 | llama | new | new | yes |" in regenerated


def test_the_committed_report_holds_the_measured_matrix():
    text = DOCS.read_text()
    block = text.split(START_MARKER, 1)[1].split(END_MARKER, 1)[0]
    for version in PROVEN_VERSIONS:  # every version the picker calls proven has its measured rows
        assert f"| {version} | llama |" in block
    assert "**no**" not in block  # and every case the versions could build matched
