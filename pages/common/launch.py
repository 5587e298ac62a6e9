"""`python -m pages.common.launch [streamlit run options]`: the dashboard with its imports warm before the first visitor.

Streamlit runs every page in this process, so a module imported here is already in ``sys.modules`` when the first
session's script asks for it. Without this, the first visitor after a start pays for importing the planner, pandas
and Plotly (about a second on a small machine) before the first figure can be drawn.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
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


def main(argv: list[str]) -> None:
    started = time.perf_counter()
    warmed = warm_imports()
    print(f"Warmed {len(warmed)} page modules and {len(sys.modules)} modules in all in "
          f"{time.perf_counter() - started:.1f} s, before the first visitor.", flush=True)
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", "app.py", *argv]
    cli.main()


if __name__ == "__main__":
    assert pages.common  # the package this module belongs to: imported first so `-m` finds its siblings
    main(sys.argv[1:])
