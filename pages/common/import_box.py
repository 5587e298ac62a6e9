"""Import a pasted launch line at the top of a page, and say what was imported, assumed and ignored.

The import runs in the button's callback, before the run that the click starts: a callback runs even when that run is
cut short by the next request (the first paint's follow-up, another click), so a click is never lost, and the page's
widgets can still be set. Its report is an outcome of the action (``outcomes``): shown while the imported settings
are on the page, whatever runs come and go.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from calculator import CalculatorError, Scenario
from calculator.serve_command import MAX_LINE_CHARS, ImportReport, import_serve_command

from . import outcomes, sentence


class Imported(NamedTuple):
    report: ImportReport
    notes: list[str]  # what the page could not show as imported
    target: Any  # where it went (e.g. which Compare column)
    model: str = ""  # the model the command names (`vllm serve MODEL` lists no flag for it)


def import_box(prefix: str, base: Callable[[Any], Scenario], apply: Callable[[Scenario, Any], list[str]],
               label: str = "Fill the page from this command", target: Callable[[], Any] | None = None,
               chosen_target: Callable[[], Any] = lambda: None) -> DeltaGenerator:
    """An expander with a text area and a button. On a click, ``apply(scenario, chosen_target())`` sets the page's
    widgets and returns notes; ``base(target)`` gives what a launch line cannot say; ``target`` draws the choice of
    where the command goes. Returns the place for the report: fill it with ``show_report`` once the page knows its
    inputs."""
    with st.expander("Import a `vllm serve` command", expanded=False):
        st.text_area("Paste a launch line: `vllm serve ...`, `python -m vllm.entrypoints.openai.api_server ...` or "
                     "`docker run ... vllm/vllm-openai ...`", key=f"{prefix}_import_text", max_chars=MAX_LINE_CHARS)
        if target:
            target()
        st.button(label, key=f"{prefix}_import_button", type="primary", on_click=_import,
                  args=(prefix, base, apply, chosen_target))
        error = st.session_state.get(f"{prefix}__import_error")
        if error:
            st.error(error, icon="📋")
    return st.container()


def _import(prefix: str, base: Callable[[Any], Scenario], apply: Callable[[Scenario, Any], list[str]],
            chosen_target: Callable[[], Any]) -> None:
    chosen = chosen_target()
    try:
        scenario, report = import_serve_command(st.session_state.get(f"{prefix}_import_text") or "",
                                                base=base(chosen))
    except CalculatorError as exc:
        st.session_state[f"{prefix}__import_error"] = sentence(exc)
        return
    st.session_state.pop(f"{prefix}__import_error", None)
    notes = apply(scenario, chosen)
    previous: Imported | None = outcomes.peek(f"{prefix}__imported")
    if previous is not None and _tagged(previous.report) and not _tagged(report):
        notes.append(f"This command names no vLLM version, so the page keeps vLLM {scenario.vllm_version}, which the "
                     "previous command's container tag set: pick the version this server runs under vLLM settings.")
    outcomes.keep(f"{prefix}__imported", Imported(report, notes, chosen, scenario.model))


def _tagged(report: ImportReport) -> bool:
    """Whether a container tag set the vLLM version (``serve_command._version`` reports it as imported)."""
    return any(item.startswith("vLLM ") and "(the container tag" in item for item in report.imported)


def show_report(prefix: str, place: DeltaGenerator, inputs_of: Callable[[Any], Any]) -> None:
    """The last import's report in ``place``, while ``inputs_of(its target)`` (the page's inputs there) are still
    what the import set."""
    imported: Imported | None = outcomes.peek(f"{prefix}__imported")
    if imported is None or outcomes.while_inputs_are(f"{prefix}__imported", inputs_of(imported.target)) is None:
        return
    with place:
        draw_report(imported.report, imported.model)
        for note in imported.notes:
            st.warning(note, icon="📋")


def draw_report(report: ImportReport, model: str = "") -> None:
    """The import's outcome, by name: one box, problems first; a positional model is listed with the rest."""
    listed = [*([model] if model and not any(i.startswith("--model") for i in report.imported) else []),
              *report.imported]
    lines = [f"**Imported** ({report.entrypoint}): " + (", ".join(f"`{i}`" for i in listed) or "the model")]
    lines += [f"**Assumed**: {a}" for a in report.assumed]
    lines += [f"**vLLM refuses**: {u}" for u in report.unknown]
    lines += [f"**Incomplete**: `{i.split(': ', 1)[0]}`: {i.split(': ', 1)[1]}" for i in report.incomplete]
    lines += [f"**Ignored** `{i.split(':', 1)[0]}`:{i.split(':', 1)[1]}" for i in report.ignored]
    box = st.warning if report.unknown or report.incomplete else st.success
    box("\n\n".join(lines), icon="📋")
