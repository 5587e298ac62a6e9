"""The worst share links a visitor can send are drawn within bounded time, memory and figure size (issue 28).

A replica of the shared deployment has 1 GiB. `/learn?in=10000000&out=10000000&len=100000000&n=16` took 35 s and
2.1 GB (one labelled heatmap cell per KV block: 320 million of them with `bs=1`, which killed the process)."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from calculator.charts import MAX_BLOCK_COLUMNS

PAGES = Path(__file__).resolve().parents[1] / "pages"
WORST_LINKS = {
    "learn, 20M-token requests, n=16": ("learn.py", {"in": "10000000", "out": "10000000", "len": "100000000",
                                                    "n": "16"}),
    "learn, the same with 1-token blocks": ("learn.py", {"in": "10000000", "out": "10000000", "len": "100000000",
                                                         "n": "16", "bs": "1"}),
}
MAX_CHART_BYTES = 1 << 20  # a figure's JSON as sent to the browser
MAX_TRACED_BYTES = 256 << 20  # Python allocations while the page runs (the page before the fix: 2.1 GB)


@pytest.mark.parametrize("case", WORST_LINKS)
def test_the_worst_links_draw_bounded_figures_in_bounded_time_and_memory(case):
    page, query = WORST_LINKS[case]
    app = AppTest.from_file(str(PAGES / page), default_timeout=120)
    for key, value in query.items():
        app.query_params[key] = value
    tracemalloc.start()
    started = time.monotonic()
    try:
        app.run()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not app.exception, [e.value for e in app.exception]
    assert time.monotonic() - started < 30
    assert peak < MAX_TRACED_BYTES, f"{peak / (1 << 20):,.0f} MiB"
    charts = app.get("plotly_chart")
    assert charts and all(len(chart.proto.spec) < MAX_CHART_BYTES for chart in charts)
    assert any(f"more than {MAX_BLOCK_COLUMNS} are not drawn one by one" in chart.proto.spec for chart in charts)
