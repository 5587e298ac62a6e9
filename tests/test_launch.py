"""The dashboard as `make dashboard` and the image start it: `streamlit run app.py` with the imports warmed first.

A real `python -m pages.common.launch` process on a free port (the same start the browser tests use), read from the
outside: the warm-up is done before the server says it listens, so the first visitor does not pay for it.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

from support.dashboard import running_dashboard

from pages.common import launch

REPO = Path(__file__).resolve().parents[1]



def printed_by_a_fresh_interpreter(script: str) -> str:
    """What ``script`` prints, run in a new Python in the repository (no state of this test process)."""
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.strip()

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


def test_after_the_warm_up_the_first_elements_of_a_run_find_streamlits_one_time_work_done():
    # NOTE: a fresh interpreter: this test process has drawn elements and imported Streamlit's emoji table already.
    # The process's first element asks env_util.is_repl(), whose inspect.stack() mapped every loaded module to its
    # file (~1,500 realpath calls), and st.page_link checked the menu's icons against the emoji table, imported then:
    # both inside the first visitor's run, 0.2-0.4 s before the first figure on a loaded 2-core machine.
    script = ("import os, sys\n"
              "from streamlit import env_util\n"
              "from streamlit.string_util import validate_icon_or_emoji\n"
              "from pages.common import PAGES, launch\n"
              "launch.warm_imports()\n"
              "before = set(sys.modules)\n"
              "assert [validate_icon_or_emoji(icon) for _, _, icon in PAGES]\n"
              "realpath, calls = os.path.realpath, []\n"
              "os.path.realpath = lambda *a, **k: calls.append(a) or realpath(*a, **k)\n"
              "env_util.is_repl()\n"
              "print(sorted(set(sys.modules) - before), len(calls) < 100)\n")
    assert printed_by_a_fresh_interpreter(script) == "[] True"


def test_the_servers_connections_send_small_writes_at_once():
    # NOTE: Streamlit binds its listening socket with protocol 0, and asyncio turns Nagle's algorithm off only for a
    # socket whose protocol reads IPPROTO_TCP: a response written in two parts (headers, then body) then waited for
    # the client's delayed acknowledgement, ~40 ms per request on Linux. Read from the accepted connection's socket.
    import asyncio
    import socket

    from streamlit.web.server.starlette import starlette_server

    original = starlette_server._bind_socket
    try:
        assert launch.serve_without_nagle()
        listener = starlette_server._bind_socket("127.0.0.1", 0, 8)
    finally:
        starlette_server._bind_socket = original
    assert listener.proto == socket.IPPROTO_TCP

    async def accept_one() -> int:
        accepted = asyncio.get_running_loop().create_future()

        class Keep(asyncio.Protocol):
            def connection_made(self, transport):
                accepted.set_result(transport.get_extra_info("socket").getsockopt(
                    socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Keep, sock=listener)
        _, writer = await asyncio.open_connection(*listener.getsockname())
        try:
            return await asyncio.wait_for(accepted, 10)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(accept_one()) != 0


def test_what_the_warm_up_loaded_is_frozen_so_a_collection_after_each_run_does_not_walk_it():
    # NOTE: a fresh interpreter: freezing this test process would keep its objects from ever being collected.
    script = ("import gc, time\n"
              "from pages.common import launch\n"
              "launch.warm_imports()\n"
              "frozen = launch.freeze_what_is_loaded()\n"
              "print(frozen > 50_000, len(gc.get_objects()) < frozen / 10)\n")
    assert printed_by_a_fresh_interpreter(script) == "True True"
