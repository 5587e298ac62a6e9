"""The Plan page's version picker says which versions are proven against real builds (AppTest)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

from calculator.engine.vllm_versions import provenance_summary, version_provenance

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def test_the_version_picker_names_the_proven_and_the_modelled_versions():
    st.cache_data.clear()
    st.cache_resource.clear()
    app = AppTest.from_file(APP, default_timeout=120)
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    picker = next(box for box in app.selectbox if box.label == "vLLM version")
    assert picker.help == provenance_summary()
    assert "0.32.0, 0.30.0, 0.29.0, 0.28.0 in every test run" in picker.help
    assert "0.19.1, 0.10.2, 0.8.5 by the version-matrix benchmark" in picker.help
    assert "0.19.1" in picker.options
    # the selected version's own standing, under the picker
    captions = [caption.value for caption in app.caption]
    assert version_provenance(picker.value) in captions
    picker.set_value("0.21.0").run()
    assert "vLLM 0.21.0: modelled from its source; not run against a real build here." in [c.value for c in app.caption]
    picker.set_value("0.28.0").run()
    assert "vLLM 0.28.0: proven against its real CPU build in every test run." in [c.value for c in app.caption]
