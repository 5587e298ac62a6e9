"""Import a pasted launch line at the top of a page, and say what was imported, assumed and ignored."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from calculator import CalculatorError, Scenario
from calculator.serve_command import ImportReport, import_serve_command

from . import sentence, shown_once


def import_box(prefix: str, base: Callable[[object], Scenario],
               apply: Callable[[Scenario, ImportReport, object], None], label: str = "Fill the page from this command",
               target: Callable[[], object] | None = None) -> None:
    """An expander with a text area; on submit ``apply`` gets the scenario, the report and the ``target`` choice
    (e.g. which Compare column), and reruns. ``base(target)`` gives what a launch line cannot say."""
    report: ImportReport | None = shown_once.value(f"{prefix}__import_report")
    with st.expander("Import a `vllm serve` command", expanded=False):
        text = st.text_area("Paste a launch line: `vllm serve ...`, `python -m vllm.entrypoints.openai.api_server "
                            "...` or `docker run ... vllm/vllm-openai ...`", key=f"{prefix}_import_text")
        chosen = target() if target else None
        if st.button(label, key=f"{prefix}_import_button", type="primary"):
            try:
                scenario, new_report = import_serve_command(text, base=base(chosen))
            except CalculatorError as exc:
                st.error(sentence(exc), icon="📋")
                return
            apply(scenario, new_report, chosen)
    if report is not None:
        show_report(report)


def show_report(report: ImportReport) -> None:
    """The import's outcome, by name: one box, problems first."""
    lines = [f"**Imported** ({report.entrypoint}): " + (", ".join(f"`{i}`" for i in report.imported) or "the model")]
    lines += [f"**Assumed**: {a}" for a in report.assumed]
    lines += [f"**Not a vLLM flag**: {u}" for u in report.unknown]
    lines += [f"**Ignored** `{i.split(':', 1)[0]}`:{i.split(':', 1)[1]}" for i in report.ignored]
    box = st.warning if report.unknown else st.success
    box("\n\n".join(lines), icon="📋")
