"""Plan page speed: first run and the median server-side rerun after a slider move (target <= 60 ms, issue 21).

Run: ``python benchmarks/plan_rerun.py``. Uses Streamlit's AppTest, which executes the page script as the server
does for one browser session (model spec cached, as after the first view), with one difference taken out: AppTest
compiles the page script afresh on every run (a new ScriptCache each time), while the server compiles it once
(``--compile-each-run`` keeps AppTest's way). Medians of wall and CPU time (``time.process_time``, the figure to
compare on a shared machine), with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import streamlit.testing.v1.app_test as app_test
from streamlit.runtime.scriptrunner.script_cache import ScriptCache
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")
MOVES = [round(0.70 + 0.01 * i, 2) for i in range(20)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile-each-run", action="store_true",
                        help="compile the page on every run, as AppTest does")
    if not parser.parse_args().compile_each_run:
        # NOTE: the server's Runtime holds one ScriptCache for every session and run; AppTest makes one per run.
        shared = ScriptCache()
        app_test.ScriptCache = lambda: shared  # type: ignore[assignment,misc]
    app = AppTest.from_file(APP, default_timeout=120)
    start = time.perf_counter()
    app.run()
    first = time.perf_counter() - start
    app.checkbox(key="plan_util_default").uncheck()
    app.run()
    timings, cpu = [], []
    for value in MOVES:
        app.slider(key="plan_util").set_value(value)
        start, start_cpu = time.perf_counter(), time.process_time()
        app.run()
        timings.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    assert not app.exception
    print(f"first run (imports, presets, model spec): {first * 1e3:.0f} ms")
    print(f"rerun after a gpu_memory_utilization move: median {statistics.median(timings) * 1e3:.0f} ms "
          f"over {len(timings)} moves (min {min(timings) * 1e3:.0f}, max {max(timings) * 1e3:.0f}); CPU time median "
          f"{statistics.median(cpu) * 1e3:.0f} ms")
    print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))

if __name__ == "__main__":
    main()
