"""`python -m pages.common.launch [streamlit run options]`: the dashboard with its imports warm before the first visitor.

Streamlit runs every page in this process, so a module imported here is already in ``sys.modules`` when the first
session's script asks for it. Without this, the first visitor after a start pays for importing the planner, pandas
and Plotly (about a second on a small machine) before the first figure can be drawn.
"""

from __future__ import annotations

import gc
import importlib
import logging
import pkgutil
import socket
import sys
import time

from streamlit import env_util

import pages.common
from calculator import Scenario, estimate, preset_ids

# NOTE: the page scripts (pages/*.py) are not imported: importing one would run it outside a session. Their
# shared modules, and through them the planner, Plotly and pandas, are what a first run spends its time on.
WARM_PACKAGES = ("pages.common",)
# NOTE: Streamlit imports these on their first use in a run, not when it starts: st.page_link checks the menu's icons
# against its emoji table (60 ms to import on an idle machine, 300 ms on a loaded one), and every page draws the menu
# before its first figure.
WARM_STREAMLIT = ("streamlit.emojis",)
# What `streamlit run` imports to serve: imported before the freeze below, so that it is frozen too.
SERVER_MODULES = ("streamlit.web.cli", "streamlit.web.bootstrap", "streamlit.web.server.starlette.starlette_app")
SKIP = frozenset({__name__})


def warm_imports() -> list[str]:
    """Import every shared page module (and so everything they import); return their names."""
    names = [f"{package}.{info.name}" for package in WARM_PACKAGES
             for info in pkgutil.iter_modules(importlib.import_module(package).__path__)]
    names = [name for name in names if name not in SKIP]
    # NOTE: st.cache_data checks its parameters when a module is imported and, with no server running yet, warns
    # that it checked them against a stand-in store; the caches themselves are made in the server on first use.
    cache_checks = logging.getLogger("streamlit.runtime.caching.cache_data_api")
    level = cache_checks.level
    cache_checks.setLevel(logging.ERROR)
    try:
        for name in (*names, *WARM_STREAMLIT):
            importlib.import_module(name)
    finally:
        cache_checks.setLevel(level)
    # NOTE: the process's first element asks env_util.is_repl() whether to print a "use streamlit run" warning,
    # and inspect.stack() there maps every loaded module to its file (1,500 realpath calls: 150 ms idle, 0.2-0.3 s
    # loaded) inside the first visitor's run; asked here, inspect keeps that table and the visitor's call is cheap.
    env_util.is_repl()
    preset_ids()  # the model menu's list, read from the bundled presets
    estimate(Scenario())  # the default plan once: the first visitor's estimate finds its code paths warm
    return names


def bind_tcp(bind):
    """Wrap Streamlit's ``_bind_socket`` so that the listening socket says it speaks TCP: each connection the server
    accepts then sends its small writes at once (Nagle's algorithm off), as asyncio does for sockets it makes itself.

    Streamlit 1.67 binds the socket itself with ``socket.socket(family)``, whose protocol reads 0; accepted sockets
    copy it, and asyncio turns Nagle's algorithm off only for a socket whose protocol reads IPPROTO_TCP
    (``asyncio.base_events._set_nodelay``, CPython 3.11). With it on, a response whose headers and body leave in two
    writes (uvicorn's h11 does so) holds the body until the browser acknowledges the headers, and Linux delays that
    acknowledgement by up to 40 ms: every static file, health check and host-config request took ~44 ms on a
    keep-alive connection, so a first load's ~150 script chunks, six connections at a time, spent over a second
    waiting (measured: benchmarks/browser_slider.py, README)."""
    def bound(address: str, port: int, backlog: int) -> socket.socket:
        sock = bind(address, port, backlog)
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM \
                or sock.proto == socket.IPPROTO_TCP:
            return sock
        tcp = socket.socket(sock.family, sock.type, socket.IPPROTO_TCP, fileno=sock.detach())
        tcp.setblocking(False)  # what Streamlit set on the socket it made
        tcp.set_inheritable(True)
        return tcp
    return bound


def serve_without_nagle() -> bool:
    """Apply ``bind_tcp`` to Streamlit's server; False where this Streamlit binds its sockets some other way."""
    from streamlit.web.server.starlette import starlette_server

    bind = getattr(starlette_server, "_bind_socket", None)
    if bind is None:
        return False
    starlette_server._bind_socket = bind_tcp(bind)
    return True


def freeze_what_is_loaded() -> int:
    """Collect once, then move every object alive now (the modules and what they hold, ~140,000 objects) out of the
    garbage collector's reach; return how many. They live as long as the server: nothing is lost by not scanning them.

    Streamlit collects garbage after every script run (runner.postScriptGC), and a full collection walks every
    tracked object: 125 ms after the warm-up on a loaded 2-core machine, 350-400 ms inside the server, holding the
    interpreter lock, so the server answered nothing else meanwhile, right after a session's first run: the
    browser's requests for the first figures' script chunks waited for it. Frozen, the collection walks only what
    the sessions made since (gc.freeze, CPython docs)."""
    for name in SERVER_MODULES:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def main(argv: list[str]) -> None:
    started = time.perf_counter()
    warmed = warm_imports()
    if not serve_without_nagle():
        print("Streamlit binds its server socket another way: Nagle's algorithm is left as it is.", flush=True)
    freeze_what_is_loaded()
    print(f"Warmed {len(warmed)} page modules and {len(sys.modules)} modules in all in "
          f"{time.perf_counter() - started:.1f} s, before the first visitor.", flush=True)
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", "app.py", *argv]
    cli.main()


if __name__ == "__main__":
    assert pages.common  # the package this module belongs to: imported first so `-m` finds its siblings
    main(sys.argv[1:])
