"""The dashboard as `make dashboard` and the image start it: `streamlit run app.py` with the imports warmed first.

A real `python -m pages.common.launch` process on a free port (the same start the browser tests use), read from the
outside: the warm-up is done before the server says it listens, so the first visitor does not pay for it.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

from support.dashboard import running_dashboard

from pages.common import launch

REPO = Path(__file__).resolve().parents[1]


def test_the_imports_are_warm_before_the_server_listens_and_the_page_then_serves(tmp_path):
    log = tmp_path / "streamlit.log"
    with running_dashboard(log) as url:
        assert urllib.request.urlopen(f"{url}/_stcore/health", timeout=10).read() == b"ok"
        text = log.read_text()
    warmed = text.index("page modules and")
    assert warmed < text.index("You can now view your Streamlit app")
    assert "No runtime found" not in text  # the cache parameter checks made while no server runs are not shown
    assert "Traceback" not in text


def test_the_warm_up_imports_every_shared_page_module_and_no_page_script():
    names = launch.warm_imports()
    on_disk = {f"pages.common.{path.stem}" for path in (REPO / "pages" / "common").glob("*.py")}
    assert set(names) == on_disk - {"pages.common.__init__", "pages.common.launch"}
    assert not [name for name in names if name.count(".") == 1]  # pages/*.py would run a page outside a session
