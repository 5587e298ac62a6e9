"""The worst share links against one dashboard process: it must stay under a replica's 1 GiB while serving them.

Run: ``python benchmarks/worst_links.py`` (``--rounds 3 --sessions 2``, ``--json out.json``).

Issue 28 found links that exhaust a replica: ``/learn?in=10000000&out=10000000&len=100000000&n=16`` took 35 s and
2.1 GB, and with ``bs=1`` killed the process. One dashboard runs as the shared image runs it (``benchmarks/
replicas.py``); ``--sessions`` users open each link at once, ``--rounds`` times, over Streamlit's own websocket
protocol (``streamlit_session.py``). The server's resident memory (VmRSS) is sampled every 50 ms from /proc while
they do: the report gives its median and peak over the whole run, and how long each link's page took. It exits 1
when the peak reaches the limit, or a page drew an exception or timed out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.replicas import dashboard_replicas  # noqa: E402
from benchmarks.streamlit_session import SessionError, StreamlitSession  # noqa: E402

MIB = 1 << 20
LIMIT_MIB = 1024  # deploy/k8s/deployment.yaml: resources.limits.memory
WORST_LINKS = {  # name -> (page URL path, query string)
    "learn, 20M-token requests, n=16": ("learn", "in=10000000&out=10000000&len=100000000&n=16"),
    "learn, the same with 1-token blocks": ("learn", "in=10000000&out=10000000&len=100000000&n=16&bs=1"),
    "plan, 1e8 context, 1-token blocks, n=16": ("", "in=10000000&out=10000000&len=100000000&n=16&bs=1"),
    "compare, two 1e8-context scenarios": ("compare", "k=2&a.len=100000000&a.bs=1&b.len=100000000&b.bs=1"),
}


class RssSampler:
    """VmRSS of one process every ``every_s`` seconds, on a thread, until stopped."""

    def __init__(self, pid: int, every_s: float = 0.05) -> None:
        self._path, self._every_s = Path(f"/proc/{pid}/status"), every_s
        self.samples_mib: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for line in self._path.read_text().splitlines():
                if line.startswith("VmRSS:"):
                    self.samples_mib.append(int(line.split()[1]) / 1024)
            self._stop.wait(self._every_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def open_link(url: str, page: str, query: str) -> tuple[float, str | None]:
    """Seconds until the page finished, and what went wrong (None when it drew without an exception)."""
    started = time.perf_counter()
    try:
        async with StreamlitSession(url, query_string=query, page=page, run_timeout_s=120) as session:
            run = await session.rerun()
            rest = await session.rerun()  # what a browser asks for after the first view (figures_first.py)
    except (SessionError, OSError) as exc:
        return time.perf_counter() - started, f"{type(exc).__name__}: {exc}"[:200]
    problems = run.exceptions + rest.exceptions
    return time.perf_counter() - started, problems[0][:200] if problems else None


async def serve_worst_links(url: str, sessions: int, rounds: int) -> dict[str, list[tuple[float, str | None]]]:
    outcomes: dict[str, list[tuple[float, str | None]]] = {name: [] for name in WORST_LINKS}
    for _ in range(rounds):
        for name, (page, query) in WORST_LINKS.items():
            outcomes[name] += await asyncio.gather(*(open_link(url, page, query) for _ in range(sessions)))
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2, help="users opening each link at once")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="planner-worst-links-") as logs, \
            dashboard_replicas(1, Path(logs)) as (replica,):
        with RssSampler(replica.process.pid) as sampler:
            started = time.perf_counter()
            outcomes = asyncio.run(serve_worst_links(replica.url, args.sessions, args.rounds))
            wall_s = time.perf_counter() - started
    samples = sampler.samples_mib
    report = {
        "sessions": args.sessions, "rounds": args.rounds, "wall_s": round(wall_s, 1), "rss_samples": len(samples),
        "rss_median_mib": round(statistics.median(samples), 1), "rss_peak_mib": round(max(samples), 1),
        "limit_mib": LIMIT_MIB,
        "links": {name: {"page_s_median": round(statistics.median(t for t, _ in runs), 2),
                         "page_s_max": round(max(t for t, _ in runs), 2),
                         "problems": sorted({p for _, p in runs if p})}
                  for name, runs in outcomes.items()},
    }
    for name, link in report["links"].items():
        print(f"{name:45s} page {link['page_s_median']:6.2f} s median, {link['page_s_max']:6.2f} s max"
              + (f" | {link['problems'][0]}" if link["problems"] else ""))
    print(f"server RSS over {wall_s:.0f} s ({len(samples)} samples): median {report['rss_median_mib']:.0f} MiB, "
          f"peak {report['rss_peak_mib']:.0f} MiB (limit {LIMIT_MIB} MiB)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    failed = report["rss_peak_mib"] >= LIMIT_MIB or any(link["problems"] for link in report["links"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
