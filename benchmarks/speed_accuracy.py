"""Accuracy of the speed model on measured vLLM runs, beside ridgepoint's and llm-optimizer's published methods.

Run: ``python benchmarks/speed_accuracy.py`` (from the repository root). It replays every record of
``benchmarks/data/speed_records.jsonl`` (a copy of ``shared/data/vllm-benchmarks/records.jsonl``) and of
``benchmarks/data/speed_records_mined.jsonl`` (the runs mined for issue 19) with the constants
in ``calculator/speed/calibration.py`` (in sample), refits the constants without each source and predicts that
source's records (held out: leave-one-source-out), runs the peers' methods, prints the summary and writes
``docs/speed-accuracy.md`` and ``docs/speed-accuracy.png``. ``--fit`` prints freshly fitted constants and bands to
paste into ``calibration.py``, with the bands by regime and the coverage; ``--check`` exits 1 when a target fails.
The held-out refits take ~4 hours in one process (``--jobs 2`` runs them in two; a refit cut short goes on where it
stopped, ``fold_fits``); they are saved to
``benchmarks/data/speed_held_out.json`` and ``--reuse-held-out`` rebuilds the report from that file. Each fold's
constants go to ``benchmarks/data/speed_fold_constants.json``: ``--rescore`` predicts every source again with the
constants fitted without it, in a few minutes, for a change that leaves the fit alone (one that only moves the
runs ``speed_replay.fitted_as_steady_state`` leaves out, such as the bursts of every prompt at once); any other
change needs the refits.
AIConfigurator's predictions come from ``benchmarks/data/speed_aiconfigurator.json`` (written by
``benchmarks/speed_aiconfigurator.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import speed_fit, speed_peers, speed_replay  # noqa: E402
from benchmarks.speed_report import render_chart, render_markdown  # noqa: E402
from calculator.speed.bands import REGIMES, band_factor, engine_generation  # noqa: E402
from calculator.speed.calibration import SpeedConstants, constants_for  # noqa: E402

METHODS = ("ours", "ours held out", "ridgepoint", "llm-optimizer", "AIConfigurator")
HELD_OUT = ROOT / "benchmarks" / "data" / "speed_held_out.json"
FOLD_CONSTANTS = ROOT / "benchmarks" / "data" / "speed_fold_constants.json"
PARTIAL = ROOT / "benchmarks" / "data" / "speed_fold_constants.partial.json"
IN_SAMPLE = "(no source left out)"  # the fit on every record, for calibration.py, saved beside the folds
FIT_INPUTS = ("calculator", "benchmarks/speed_replay.py", "benchmarks/speed_fit.py",
              "benchmarks/data/speed_records.jsonl", "benchmarks/data/speed_records_mined.jsonl",
              "benchmarks/data/speed_configs")
AICONFIGURATOR = ROOT / "benchmarks" / "data" / "speed_aiconfigurator.json"
HEADLINE = ("ttft_ms", "tpot_ms", "output_tok_s")
TARGETS_PCT = {"ttft_ms": 25.0, "tpot_ms": 12.0, "output_tok_s": 12.0}  # issue 19
BAND_SHARE = 0.8  # the band holds 80 % of the held-out errors
MIN_BAND_VALUES = 5  # fewer held-out values in a regime: its band is the regime-free one (no 80 % of 2 values)
BAND_METRICS = {"ttft_ms": "ttft", "tpot_ms": "tpot", "output_tok_s": "throughput", "request_per_s": "throughput"}


def _fold(job: tuple[list[dict], str]) -> tuple[str, SpeedConstants, SpeedConstants]:
    """Refit every constant without the records of one source: (source, CUDA constants, ROCm constants)."""
    records, source = job
    return (source, *speed_fit.fit_all([r for r in records if speed_replay.source_of(r) != source]))


def _held_out(records: list[dict], source: str, cuda: SpeedConstants,
              rocm: SpeedConstants) -> dict[str, dict[str, float]]:
    """Predict one source's records with the constants fitted without it."""
    return {record["id"]: speed_replay.predict(record, rocm if speed_replay.deployment(record["id"]).gpu.platform
                                               == "rocm" else cuda)
            for record in records if speed_replay.source_of(record) == source}


def _rescored(job: tuple[list[dict], str, dict]) -> dict[str, dict[str, float]]:
    records, source, constants = job
    return _held_out(records, source, SpeedConstants(**constants["cuda"]), SpeedConstants(**constants["rocm"]))


def newer_than_the_fit(sources: list[str]) -> dict[str, dict]:
    """source -> the constants in calibration.py, for each source the last refit had no fold for: it was added to
    the records after that fit, so those constants never saw it and predict it held out."""
    folds = json.loads(FOLD_CONSTANTS.read_text())
    newer = [source for source in sources if source not in folds]
    if newer:
        print(f"predicted with calibration.py's constants, fitted before these sources were added: {', '.join(newer)}")
    return {source: {"cuda": constants_for("cuda").model_dump(), "rocm": constants_for("rocm").model_dump()}
            for source in newer}


def model_fingerprint() -> str:
    """A digest of every file the fits read: the planner (but calibration.py, whose fitted values no fit starts
    from), the replay and the fit, the records and their configs. Fold fits saved under another digest are stale."""
    digest = hashlib.sha256()
    files = sorted(path for base in FIT_INPUTS for path in ((ROOT / base).rglob("*") if (ROOT / base).is_dir()
                                                            else [ROOT / base])
                   if path.is_file() and "__pycache__" not in path.parts and path.name != "calibration.py")
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def fold_fits(records: list[dict], sources: list[str], pool: Executor) -> dict[str, dict]:
    """source -> the CUDA and ROCm constants fitted without it. Each fold is saved to ``PARTIAL`` as it ends (a
    fold takes ~5 minutes, all of them ~2 hours on two cores), so a refit cut short goes on where it stopped as long
    as no file it reads has changed (``model_fingerprint``)."""
    fingerprint = model_fingerprint()
    saved = json.loads(PARTIAL.read_text()) if PARTIAL.exists() else {}
    folds = saved.get("folds", {}) if saved.get("fingerprint") == fingerprint else {}
    if folds:
        print(f"{len(folds)} of {len(sources)} fold fits reused from {PARTIAL.name} (fingerprint {fingerprint})")
    jobs = {pool.submit(_fold, (records, source)): source for source in sources if source not in folds}
    for done in as_completed(jobs):
        source, cuda, rocm = done.result()
        folds[source] = {"cuda": cuda.model_dump(), "rocm": rocm.model_dump()}
        PARTIAL.write_text(json.dumps({"fingerprint": fingerprint, "folds": folds}, indent=1) + "\n")
        print(f"fold {len(folds)}/{len(sources)}: {source}", flush=True)
    return folds


def predictions(records: list[dict], reuse_held_out: bool = False, jobs: int = 1,
                rescore: bool = False, fitted: dict[str, dict] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """record id -> method -> metric -> predicted value (methods that cannot express a record's load skip it);
    ``fitted``: the fold fits, when ``--fit`` has run them already."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    cached = json.loads(AICONFIGURATOR.read_text())["predictions"] if AICONFIGURATOR.exists() else {}
    for record in records:
        platform = speed_replay.deployment(record["id"]).gpu.platform
        out[record["id"]] = {"ours": speed_replay.predict(record, constants_for(platform))}
        for name, method in (("ridgepoint", speed_peers.ridgepoint), ("llm-optimizer", speed_peers.llm_optimizer)):
            predicted = method(record)
            if predicted is not None:
                out[record["id"]][name] = predicted
        aic = cached.get(record["id"], {})
        if "error" not in aic and aic:
            out[record["id"]]["AIConfigurator"] = {k: v for k, v in aic.items() if k in speed_replay.METRICS}
    if reuse_held_out:
        for record_id, values in json.loads(HELD_OUT.read_text()).items():
            if record_id in out:  # a record the planner no longer starts is not scored
                out[record_id]["ours held out"] = values
        return out
    sources = sorted({speed_replay.source_of(r) for r in records})
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        if rescore:
            folds = {**newer_than_the_fit(sources), **json.loads(FOLD_CONSTANTS.read_text())}
            held_outs = pool.map(_rescored, [(records, source, folds[source]) for source in sources])
        else:
            folds = fold_fits(records, sources, pool) if fitted is None else fitted
            FOLD_CONSTANTS.write_text(json.dumps({source: folds[source] for source in sources}, indent=1) + "\n")
            PARTIAL.unlink(missing_ok=True)
            held_outs = pool.map(_rescored, [(records, source, folds[source]) for source in sources])
        for held_out in held_outs:
            for record_id, values in held_out.items():
                out[record_id]["ours held out"] = values
    HELD_OUT.write_text(json.dumps({r: v["ours held out"] for r, v in out.items()}, indent=1) + "\n")
    return out


def errors(records: list[dict], predicted: dict) -> dict[str, dict[str, dict[str, float]]]:
    """method -> metric -> record id -> (predicted - measured) / measured in %."""
    table: dict[str, dict[str, dict[str, float]]] = {m: {} for m in METHODS}
    for record in records:
        for metric, value in speed_replay.measured(record).items():
            for method, values in predicted[record["id"]].items():
                guess = values.get(metric)
                if guess is not None and math.isfinite(guess):
                    table[method].setdefault(metric, {})[record["id"]] = (guess / value - 1) * 100
    return table


def median_abs(values: list[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else math.nan


def summary(table: dict) -> dict[str, dict[str, tuple[float, int]]]:
    """metric -> method -> (median |error| %, records)."""
    metrics = sorted({m for per in table.values() for m in per}, key=speed_replay.METRICS.index)
    return {metric: {method: (median_abs(list(table[method].get(metric, {}).values())),
                              len(table[method].get(metric, {}))) for method in METHODS} for metric in metrics}


def head_to_head(table: dict, metric: str, peer: str) -> tuple[float, float, int]:
    """Median |error| of ours (held out) and of ``peer`` on the records both predict."""
    ours, theirs = table["ours held out"].get(metric, {}), table[peer].get(metric, {})
    common = sorted(set(ours) & set(theirs))
    return median_abs([ours[r] for r in common]), median_abs([theirs[r] for r in common]), len(common)


def targets(table: dict) -> list[tuple[str, float, float, bool]]:
    rows = []
    for metric, limit in TARGETS_PCT.items():
        for method in ("ours", "ours held out"):
            value = median_abs(list(table[method].get(metric, {}).values()))
            rows.append((f"{metric} median abs. error %, {method}", value, limit, value <= limit))
        for peer in ("ridgepoint", "llm-optimizer", "AIConfigurator"):
            ours, theirs, n = head_to_head(table, metric, peer)
            if n == 0:
                continue
            rows.append((f"{metric}: ours held out vs {peer} (n={n})", ours, theirs, n == 0 or ours < theirs))
    return rows


def cuda_held_out(table: dict) -> dict[str, tuple[float, int]]:
    """Held-out median |error| on CUDA GPUs only."""
    out = {}
    for metric in HEADLINE:
        values = [e for r, e in table["ours held out"].get(metric, {}).items()
                  if speed_replay.deployment(r).gpu.platform != "rocm"]
        out[metric] = (median_abs(values), len(values))
    return out


def bands(table: dict) -> dict[str, float]:
    """Regime-free band factors from all held-out errors (the estimate's own band fields), each at the share that
    holds BAND_SHARE of a source's values when sized without it (``source_aware_share``)."""
    out: dict[str, list[tuple[str, float]]] = {name: [] for name in ("ttft", "tpot", "throughput")}
    for metric, name in BAND_METRICS.items():
        out[name] += [(speed_replay.source_of({"id": record_id}), math.log(1 + e / 100))
                      for record_id, e in table["ours held out"].get(metric, {}).items()]
    return {name: round(band_factor([e for _, e in rows], source_aware_share(rows)), 2) if rows else 1.5
            for name, rows in out.items()}


def regime_residuals(table: dict) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """regime -> band metric -> (source, log(predicted / measured)) of every held-out figure."""
    out: dict[str, dict[str, list[tuple[str, float]]]] = {r: {"ttft": [], "tpot": [], "throughput": []}
                                                          for r in REGIMES}
    for metric, name in BAND_METRICS.items():
        for record_id, error in table["ours held out"].get(metric, {}).items():
            out[speed_replay.regime_of(record_id)][name].append(
                (speed_replay.source_of({"id": record_id}), math.log(1 + error / 100)))
    return out


def unseen_inside(rows: list[tuple[str, float]], share: float) -> int:
    """How many of ``rows`` (source, held-out log error) lie inside the band that holds ``share`` of the other
    sources' errors: the band tried on sources it never saw."""
    inside = 0
    for source, error in rows:
        others = [e for s, e in rows if s != source]
        inside += bool(others) and abs(error) <= math.log(band_factor(others, share)) + 1e-12
    return inside


def source_aware_share(rows: list[tuple[str, float]]) -> float:
    """The least share of the held-out errors, from BAND_SHARE up, whose band holds BAND_SHARE of the values of
    sources it never saw. A source's errors move together (one harness, one GPU, one stack), so a band holding 80 %
    of the pooled errors holds less on a new source; this is the share that holds 80 % on one."""
    shares = [round(BAND_SHARE + step / 100, 2) for step in range(0, 21)]
    return next((share for share in shares if unseen_inside(rows, share) >= BAND_SHARE * len(rows)), 1.0)


def regime_bands(residuals: dict, pooled: dict[str, float]) -> dict[str, dict[str, float]]:
    """The factor per regime and metric that holds its source-aware share of its held-out errors; ``pooled`` (all
    regimes) where a regime has fewer than MIN_BAND_VALUES of them."""
    return {regime: {name: round(band_factor([e for _, e in rows], source_aware_share(rows)), 2)
                     if len(rows) >= MIN_BAND_VALUES else pooled[name] for name, rows in per.items()}
            for regime, per in residuals.items()}


def band_coverage(residuals: dict) -> dict[str, dict[str, tuple[int, int, float]]]:
    """How the bands hold on sources they never saw: each source's values against the band sized (at the share
    ``regime_bands`` takes) on the other sources' held-out errors of the same regime and metric.
    regime -> metric -> (inside, values, share)."""
    out: dict[str, dict[str, tuple[int, int, float]]] = {}
    for regime, per in residuals.items():
        out[regime] = {}
        for name, rows in per.items():
            share = source_aware_share(rows) if rows else BAND_SHARE
            out[regime][name] = (unseen_inside(rows, share), len(rows), share)
    return out


def coverage(records: list[dict]) -> dict[str, object]:
    """What the records span (calibration.COVERAGE)."""
    results = [speed_replay.deployment(r["id"]) for r in records]
    return {"gpu_families": sorted({d.gpu.family for d in results}),
            "engines": sorted({engine_generation(d) for d in results}),
            "model_kinds": sorted({"MoE" if d.model.moe else "dense" for d in results}),
            "max_running_requests": round(max(speed_replay.running_requests(r["id"]) for r in records))}


def domain_effect(records: list[dict], table: dict) -> dict[str, tuple[float, int]]:
    """Median held-out |log error| of the figures whose record lay outside what the other sources cover (its GPU
    family, engine generation or model kind absent from them, or more requests in the engine than any of them)
    against those inside: how much wider a band must be off the measured runs."""
    logs: dict[str, list[float]] = {"outside": [], "inside": []}
    for record in records:
        source = speed_replay.source_of(record)
        others = coverage([r for r in records if speed_replay.source_of(r) != source])
        result = speed_replay.deployment(record["id"])
        outside = (result.gpu.family not in others["gpu_families"]
                   or engine_generation(result) not in others["engines"]
                   or ("MoE" if result.model.moe else "dense") not in others["model_kinds"]
                   or speed_replay.running_requests(record["id"]) > others["max_running_requests"])
        for metric in BAND_METRICS:
            error = table["ours held out"].get(metric, {}).get(record["id"])
            if error is not None:
                logs["outside" if outside else "inside"].append(abs(math.log(1 + error / 100)))
    return {k: (statistics.median(v) if v else math.nan, len(v)) for k, v in logs.items()}


def _wider_or_narrower(ratio: float) -> str:
    return f"a {ratio:.1f}x wider" if ratio >= 1 else f"a {1 / ratio:.1f}x narrower"


def regime_section(residuals: dict, factors: dict, held: dict, spans: dict, domain: dict,
                   refused: dict[str, str]) -> str:
    label = {"ttft": "TTFT", "tpot": "TPOT", "throughput": "throughput"}
    rows = ["## Bands by regime", "",
            "Each band is sized to hold 80 % of the values of a source it never saw (the factor each way): a "
            "source's errors move together (one harness, one GPU, one software stack), so a band holding 80 % of "
            "the pooled held-out errors holds less on a new source. **holds on unseen sources** checks it: every "
            "source's values against the band sized on the other sources' held-out errors of the same regime, at "
            "the least share of them (from 80 % up, *share*) for which that holds 80 % of the values. Regimes "
            "(`calculator/speed/bands.py`): *one "
            "request* in the engine; *below the knee*, a batch that decodes memory-bound with no queue; "
            "*saturated*, requests queue for a slot (more users than the engine runs, a rate near capacity) or the "
            "decode batch is past the batch where compute overtakes memory traffic. A regime with fewer than "
            f"{MIN_BAND_VALUES} held-out values of a figure takes the band of all regimes (marked *pooled*).", "",
            "| regime | figure | values | share | band ×/÷ | holds on unseen sources |",
            "|---|---|---:|---:|---:|---:|"]
    for regime, per in residuals.items():
        for name, values in per.items():
            inside, n, share = held[regime][name]
            held_share = f"{inside} of {n} ({100 * inside / n:.0f} %)" if n else "—"
            pooled = " (pooled)" if len(values) < MIN_BAND_VALUES else ""
            rows.append(f"| {regime} | {label[name]} | {len(values)} | {100 * share:.0f} % | "
                        f"{factors[regime][name]}{pooled} | {held_share} |")
    short = [f"{regime} {label[name]} ({inside} of {n})" for regime, per in held.items()
             for name, (inside, n, _) in per.items() if n >= MIN_BAND_VALUES and inside < BAND_SHARE * n]
    if short:
        rows += ["", "Below 80 % even at the widest band: " + ", ".join(short) + ". Some of these sources miss by "
                 "more than any other source does, so no band sized on the others holds them; the band is the "
                 "widest held-out error, and these figures are the speed model's least certain."]
    (outside, n_out), (inside, n_in) = domain["outside"], domain["inside"]
    rows += ["", "## Outside the measured runs", "",
             f"The records span GPU families {', '.join(spans['gpu_families'])}; engines "
             f"{', '.join(spans['engines'])}; {' and '.join(spans['model_kinds'])} models; up to "
             f"{spans['max_running_requests']:,} requests in the engine at once. A deployment outside that gets a "
             "band whose log-width is doubled, and the Speed section, the Recommend page and the CLI say why.",
             "",
             f"Held out, the figures of records that lay outside what the other sources cover missed by a median "
             f"{100 * (math.exp(outside) - 1):.0f} % (n={n_out}); those inside by {100 * (math.exp(inside) - 1):.0f} "
             f"% (n={n_in}): {_wider_or_narrower(outside / inside)} log-error off the measured runs. With so few "
             "records outside (the sources overlap in every dimension but the number of requests at once), this does "
             "not measure the widening; doubling the log-width is a judgement, not a fit."]
    if refused:
        rows += ["", "Not scored: the planner says these measured runs cannot start (they did): "
                 + "; ".join(f"`{r}` ({reason})" for r, reason in refused.items()) + "."]
    unscored = [(r["id"], metric, why) for r in speed_replay.load_records()
                for metric, why in r.get("unscored", {}).items()]
    if unscored:
        rows += ["", "Figures left unscored because their own source contradicts them (each record's `unscored` "
                 "field): " + "; ".join(f"`{r}` {metric} ({why})" for r, metric, why in unscored) + "."]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="print freshly fitted constants for calibration.py")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    parser.add_argument("--reuse-held-out", action="store_true",
                        help=f"read the held-out predictions from {HELD_OUT.name}")
    parser.add_argument("--rescore", action="store_true",
                        help=f"predict each source with the constants of {FOLD_CONSTANTS.name} (no refits): only "
                             "for a change that leaves the fit alone")
    parser.add_argument("--jobs", type=int, default=1, help="held-out refits run in this many processes")
    args = parser.parse_args(argv)
    records = speed_replay.scored_records()
    refused = {r["id"]: speed_replay.refused(r) for r in speed_replay.load_records() if speed_replay.refused(r)}
    for record_id, reason in refused.items():
        print(f"not scored: the planner says {record_id} cannot start ({reason})")
    fitted = None
    if args.fit:
        sources = sorted({speed_replay.source_of(r) for r in records})
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            fitted = fold_fits(records, [IN_SAMPLE, *sources], pool)
        cuda, rocm = SpeedConstants(**fitted[IN_SAMPLE]["cuda"]), SpeedConstants(**fitted[IN_SAMPLE]["rocm"])
        print("CUDA =", repr(cuda))
        print("ROCM =", repr(rocm))
        print("NOTE: the bands below use the constants in calibration.py; paste these, then take the bands that "
              "--reuse-held-out prints")
    predicted = predictions(records, args.reuse_held_out, args.jobs, args.rescore, fitted)
    table = errors(records, predicted)
    rows = targets(table)
    for metric, per_method in summary(table).items():
        print(f"{metric:14}", "  ".join(f"{m}: {v:6.1f}% (n={n})" for m, (v, n) in per_method.items()))
    for name, value, limit, holds in rows:
        print(f"{'ok ' if holds else 'NO '} {name}: {value:.1f} vs {limit:.1f}")
    print("bands (held out, 80 %):", bands(table))
    residuals = regime_residuals(table)
    factors, held, spans = regime_bands(residuals, bands(table)), band_coverage(residuals), coverage(records)
    domain = domain_effect(records, table)
    print("REGIME_BAND_FACTOR =", factors)
    print("band coverage on unseen sources:", held)
    print("COVERAGE:", spans, "| outside vs inside median |log error|:", domain)
    docs = ROOT / "docs"
    render_chart(records, predicted, table, docs / "speed-accuracy.png")
    aic = json.loads(AICONFIGURATOR.read_text()) if AICONFIGURATOR.exists() else None
    (docs / "speed-accuracy.md").write_text(render_markdown(records, predicted, table, summary(table), rows,
                                                            bands(table), png_name="speed-accuracy.png",
                                                            aiconfigurator=aic, cuda_held_out=cuda_held_out(table),
                                                            regimes=regime_section(residuals, factors, held, spans,
                                                                                   domain, refused)))
    return 1 if args.check and not all(holds for *_, holds in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
