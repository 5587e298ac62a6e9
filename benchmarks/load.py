"""Many users at once: N concurrent Plan-page sessions moving a slider, against one dashboard or replicas behind nginx.

Run: ``python benchmarks/load.py`` (``make benchmark-load``); ``--sessions 10 25``, ``--replicas 2``, ``--json``.

Each session speaks Streamlit's own websocket protocol (``streamlit_session.py``): it opens the Plan page, unticks
"vLLM's default" for gpu_memory_utilization, then moves that slider ``--moves`` times with a random pause between
moves (a user reading the KPIs). Measured per move: slider-to-update (the BackMsg leaving the client until the first
KPI ``st.metric`` arrives: what the user waits for) and slider-to-finished (``script_finished``); errors are
sessions that died, timed out or drew an exception. The server's memory (VmRSS, VmHWM) and CPU time (utime + stime) are read from /proc: CPU
per rerun says how many reruns a second one core sustains. The server and the clients run on separate CPUs
(``--server-cpus``, ``--client-cpus``) so the clients' work does not slow the server being measured; the clients'
own CPU time is reported to show it is small.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.replicas import dashboard_replicas, nginx_balancer  # noqa: E402
from benchmarks.streamlit_session import SessionError, StreamlitSession  # noqa: E402

SLIDER, UNLOCK = "plan_util", "plan_util_default"
MIB = 1 << 20


@dataclass
class SessionResult:
    update_s: list[float] = field(default_factory=list)
    finished_s: list[float] = field(default_factory=list)
    first_view_s: float | None = None
    error: str | None = None


@dataclass
class LoadReport:
    sessions: int
    replicas: int
    moves_per_session: int
    moves_measured: int
    update_p50_ms: float
    update_p95_ms: float
    finished_p50_ms: float
    finished_p95_ms: float
    first_view_p50_ms: float
    errors: int
    error_examples: list[str]
    rss_started_mib: float  # the process before any page view (imports of the server only)
    rss_before_mib: float  # after one warm-up view per replica (the page's imports, presets, caches)
    rss_after_mib: float
    rss_peak_mib: float
    server_cpu_ms_per_rerun: float  # all reruns: first views and their rest, the unlock, the moves
    client_cpu_s: float
    wall_s: float
    load_average_1min: float  # of the whole machine while measuring: other work slows the server too


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


async def one_session(url: str, moves: int, think_s: tuple[float, float], rng: random.Random,
                      source_address: str | None, start_delay_s: float) -> SessionResult:
    result = SessionResult()
    await asyncio.sleep(start_delay_s)
    try:
        async with StreamlitSession(url, source_address=source_address) as session:
            first = await session.rerun()
            # NOTE: a browser's first run ends after the KPIs and the browser then asks for the rest of the page
            # (pages/common/figures_first.py); a plain rerun stands in for that request.
            rest = await session.rerun()
            result.first_view_s = first.finished_s + rest.finished_s
            await session.rerun({UNLOCK: False})
            for _ in range(moves):
                await asyncio.sleep(rng.uniform(*think_s))
                run = await session.rerun({SLIDER: [round(rng.uniform(0.80, 1.0), 2)]})
                if run.exceptions:
                    raise SessionError(f"the page drew an exception: {run.exceptions[0][:200]}")
                if run.first_metric_s is None:
                    raise SessionError("a rerun drew no KPI")
                result.update_s.append(run.first_metric_s)
                result.finished_s.append(run.finished_s or float("nan"))
    except (SessionError, OSError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"[:300]
    return result


async def drive(url: str, sessions: int, moves: int, think_s: tuple[float, float], seed: int,
                source_addresses: bool) -> list[SessionResult]:
    rng = random.Random(seed)
    tasks = [one_session(url, moves, think_s, random.Random(rng.random()),
                         f"127.0.{index + 1}.1" if source_addresses else None, rng.uniform(0, 2.0))
             for index in range(sessions)]
    return await asyncio.gather(*tasks)


def measure(sessions: int, *, replicas: int, moves: int, think_s: tuple[float, float], seed: int,
            server_cpus: list[int],
            logs: Path) -> LoadReport:
    with dashboard_replicas(replicas, logs / f"n{sessions}", cpus=server_cpus) as started:
        target = started[0].url
        balancer = nginx_balancer([r.port for r in started], logs / f"n{sessions}" / "nginx") if replicas > 1 else None
        with balancer or contextlib.nullcontext() as balanced:
            if balanced:
                target = balanced[0]
            started_rss = sum(r.rss_bytes() for r in started)
            # NOTE: one warm-up view per replica loads the presets and imports, as the first visitor would.
            asyncio.run(drive(target, replicas, 0, (0, 0), seed + 1, source_addresses=replicas > 1))
            before = sum(r.rss_bytes() for r in started)
            cpu_before = sum(r.cpu_s() for r in started)
            client_before = _own_cpu_s()
            wall = time.perf_counter()
            results = asyncio.run(drive(target, sessions, moves, think_s, seed, source_addresses=replicas > 1))
            wall = time.perf_counter() - wall
            server_cpu = sum(r.cpu_s() for r in started) - cpu_before
            client_cpu = _own_cpu_s() - client_before
            after = sum(r.rss_bytes() for r in started)
            peak = sum(r.peak_rss_bytes() for r in started)
            load = os.getloadavg()[0]
    updates = [t for r in results for t in r.update_s]
    finished = [t for r in results for t in r.finished_s]
    errors = [r.error for r in results if r.error]
    return LoadReport(
        sessions=sessions, replicas=replicas, moves_per_session=moves, moves_measured=len(updates),
        update_p50_ms=percentile(updates, 0.50) * 1e3, update_p95_ms=percentile(updates, 0.95) * 1e3,
        finished_p50_ms=percentile(finished, 0.50) * 1e3, finished_p95_ms=percentile(finished, 0.95) * 1e3,
        first_view_p50_ms=statistics.median([r.first_view_s for r in results if r.first_view_s] or [float("nan")])
        * 1e3, errors=len(errors), error_examples=errors[:3], rss_started_mib=started_rss / MIB,
        rss_before_mib=before / MIB, rss_after_mib=after / MIB, rss_peak_mib=peak / MIB,
        server_cpu_ms_per_rerun=server_cpu * 1e3 / max(1, sessions * (moves + 3)),
        client_cpu_s=client_cpu, wall_s=wall, load_average_1min=load)


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[10, 25])
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--moves", type=int, default=10, help="slider moves per session")
    parser.add_argument("--think-s", type=float, nargs=2, default=(1.0, 5.0), metavar=("MIN", "MAX"),
                        help="pause between two moves of one user, drawn uniformly")
    parser.add_argument("--seed", type=int, default=7)
    cpus = sorted(os.sched_getaffinity(0))
    parser.add_argument("--server-cpus", type=int, nargs="+", default=cpus[:1] if len(cpus) > 1 else cpus)
    parser.add_argument("--client-cpus", type=int, nargs="+", default=cpus[1:2] if len(cpus) > 1 else cpus)
    parser.add_argument("--json", type=Path, help="also write the reports here")
    args = parser.parse_args()
    os.sched_setaffinity(0, set(args.client_cpus))
    print(f"server CPUs {args.server_cpus}, client CPUs {args.client_cpus}, {args.replicas} replica(s)"
          f"{' behind nginx (ip_hash)' if args.replicas > 1 else ''}; {args.moves} moves per session, pauses "
          f"{args.think_s[0]:g}-{args.think_s[1]:g} s", flush=True)
    reports = []
    with tempfile.TemporaryDirectory(prefix="planner-load-") as logs:
        for sessions in args.sessions:
            report = measure(sessions, replicas=args.replicas, moves=args.moves, think_s=tuple(args.think_s),
                             seed=args.seed, server_cpus=args.server_cpus, logs=Path(logs))
            reports.append(report)
            print(f"{sessions:3d} sessions: slider-to-update p50 {report.update_p50_ms:6.0f} ms, p95 "
                  f"{report.update_p95_ms:6.0f} ms | run finished p50 {report.finished_p50_ms:6.0f} ms, p95 "
                  f"{report.finished_p95_ms:6.0f} ms | first view p50 {report.first_view_p50_ms:5.0f} ms | "
                  f"{report.moves_measured} moves, {report.errors} errors | server RSS {report.rss_started_mib:.0f} / "
                  f"{report.rss_before_mib:.0f} "
                  f"-> {report.rss_after_mib:.0f} MiB (peak {report.rss_peak_mib:.0f}) | server CPU "
                  f"{report.server_cpu_ms_per_rerun:.0f} ms per rerun, clients {report.client_cpu_s:.1f} s | "
                  f"{report.wall_s:.0f} s, load average {report.load_average_1min:.1f}", flush=True)
            for example in report.error_examples:
                print(f"    error: {example}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in reports], indent=2) + "\n")


if __name__ == "__main__":
    main()
