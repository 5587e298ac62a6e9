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


def test_a_deployment_the_version_cannot_run_says_so_on_plan_and_compare():
    # vLLM 0.10.2 on CPU has no V0 engine, yet V1 sends sliding-window models (Mistral 7B v0.1) to V0: the real
    # 0.10.2 server refused tiny-mistral (docs/accuracy.md, version matrix).
    st.cache_data.clear()
    plan = AppTest.from_file(APP, default_timeout=120)
    for key, value in {"m": "mistralai/Mistral-7B-v0.1", "dev": "cpu", "v": "0.10.2"}.items():
        plan.query_params[key] = value
    plan.run()
    assert not plan.exception, [e.value for e in plan.exception]
    assert any(box.value.startswith("**Does not run: vLLM 0.10.2 cannot serve this deployment on CPU")
               for box in plan.error)
    compare = AppTest.from_file(str(Path(APP).parent / "pages" / "compare.py"), default_timeout=120)
    compare.query_params["b.v"] = "0.26.0"
    compare.query_params["b.bs"] = "8"  # V1's FlashAttention takes multiples of 16: "No common block size for 8"
    compare.run()
    assert not compare.exception, [e.value for e in compare.exception]
    assert "Does not run" in [box.value.split("\n")[0].strip("*") for box in compare.error]
