"""A page under Streamlit's AppTest, opened the way a share link opens it."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def run_with_link(script: str, query: dict[str, str] | None = None) -> AppTest:
    """Run ``script`` once with ``query`` as its address bar's parameters; the run must not raise."""
    app = AppTest.from_file(script, default_timeout=120)
    for key, value in (query or {}).items():
        app.query_params[key] = value
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def metrics(app: AppTest) -> dict[str, str]:
    """Every st.metric on the page: label -> value as shown."""
    return {metric.label: metric.value for metric in app.metric}
