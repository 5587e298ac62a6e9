"""An action's outcome (a share link's warnings, an import's report) belongs to the action, not to a run.

Found by a CI failure of the import browser test: the report could be lost when the import's click met the first
paint's follow-up run. Now the import runs in the button's callback (which runs even when its run is cut short), and
its report stays while the page shows what the import set, over any number of runs, cut short or not.
"""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest
from support.apptest import metrics, run_with_link

APP = str(Path(__file__).resolve().parents[1] / "app.py")

IMPORTED = "vllm serve Qwen/Qwen3-8B --max-model-len 16384 --swap-space 8"


def _page() -> None:
    import streamlit as st

    from pages.common import outcomes

    if new := st.session_state.pop("new", None):
        outcomes.keep("warnings", new)
    place = st.container()
    if st.session_state.get("cut_short"):
        st.stop()  # what the first paint's follow-up or a click does to a run in progress
    value = st.number_input("max_model_len", value=4096, key="len")
    for message in outcomes.while_inputs_are("warnings", value) or ():
        place.warning(message)


def _warnings(app: AppTest) -> list[str]:
    return [w.value for w in app.warning]


def test_an_outcome_survives_cut_short_runs_and_any_number_of_runs_until_an_input_changes() -> None:
    app = AppTest.from_function(_page, default_timeout=30)
    app.session_state["new"] = ["the link named an unknown GPU"]
    app.session_state["cut_short"] = True
    app.run()
    assert _warnings(app) == []  # the run stopped before the page knew its inputs
    app.session_state["cut_short"] = False
    for _ in range(3):  # the follow-up run, a chart's event, another follow-up: nothing changed
        app.run()
        assert _warnings(app) == ["the link named an unknown GPU"]
    app.number_input(key="len").set_value(8192).run()
    assert _warnings(app) == []  # the user changed an input: the link's warning no longer describes the page
    app.number_input(key="len").set_value(4096).run()
    assert _warnings(app) == []  # and it does not come back


def test_a_new_action_replaces_the_outcome_of_the_last() -> None:
    app = AppTest.from_function(_page, default_timeout=30)
    app.session_state["new"] = ["first"]
    app.run()
    app.session_state["new"] = ["second"]
    app.run()
    assert _warnings(app) == ["second"]


def _imported(app: AppTest) -> list[str]:
    return [box.value for box in [*app.success, *app.warning] if "**Imported**" in box.value]


def test_an_import_report_stays_while_the_imported_settings_are_on_the_page() -> None:
    app = run_with_link(APP)
    app.text_area(key="plan_import_text").set_value(IMPORTED)
    app.button(key="plan_import_button").click().run()
    assert not app.exception, [e.value for e in app.exception]
    assert len(_imported(app)) == 1 and "`--max-model-len 16384`" in _imported(app)[0]
    assert app.number_input(key="plan_max_model_len").value == 16384  # the page shows the imported deployment
    assert app.session_state["plan_preset"] == "Qwen/Qwen3-8B"
    for _ in range(3):  # runs that change nothing (a follow-up, an interrupted click's successor)
        app.run()
        assert len(_imported(app)) == 1
    app.number_input(key="plan_max_model_len").set_value(8192).run()
    assert _imported(app) == []


def test_a_failed_import_says_why_and_keeps_the_page() -> None:
    app = run_with_link(APP)
    before = metrics(app)
    app.text_area(key="plan_import_text").set_value("vllm serve")
    app.button(key="plan_import_button").click().run()
    assert not app.exception and app.error and _imported(app) == []
    assert metrics(app) == before


def test_the_browser_stops_a_paste_longer_than_the_importer_reads() -> None:
    app = run_with_link(APP)
    assert app.text_area(key="plan_import_text").max_chars == 16_384  # the importer refuses longer lines
