"""Plan page speed: first run and the median server-side rerun after a slider move (target < 300 ms).

Run: ``python benchmarks/plan_rerun.py``. Uses Streamlit's AppTest, which executes the page script exactly as
the server does for one browser session (model spec cached, as after the first view).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")
MOVES = [round(0.70 + 0.01 * i, 2) for i in range(20)]


def main() -> None:
    app = AppTest.from_file(APP, default_timeout=120)
    start = time.perf_counter()
    app.run()
    first = time.perf_counter() - start
    app.checkbox(key="plan_util_default").uncheck()
    app.run()
    timings = []
    for value in MOVES:
        app.slider(key="plan_util").set_value(value)
        start = time.perf_counter()
        app.run()
        timings.append(time.perf_counter() - start)
    assert not app.exception
    print(f"first run (imports, presets, model spec): {first * 1e3:.0f} ms")
    print(f"rerun after a gpu_memory_utilization move: median {statistics.median(timings) * 1e3:.0f} ms "
          f"over {len(timings)} moves (min {min(timings) * 1e3:.0f}, max {max(timings) * 1e3:.0f})")


if __name__ == "__main__":
    main()
