"""Rendering of the accuracy benchmark: the console table, docs/accuracy.md, the chart and the bands file."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.accuracy import (
    METHODS,
    SOURCE_OUT,
    band_coverage,
    METRIC_LABELS,
    METRICS,
    MIN_POOL_GIB,
    Report,
    Row,
    summary,
)
from benchmarks.accuracy_findings import findings_sections, missing_config
from calculator.units import GIB

# What we know about the largest misses (documentation only; the engine has no per-record case).
RESIDUAL_NOTES = {
    "vllm-5248-2xt4-deepseek-coder-6.7b-tp2": "version and max_model_len not printed (mid-2024 V0, likely <= 0.5: the "
    "used-memory era); the derived 65,536-token context cannot hold one request in 8,112 tokens, so the outcome is "
    "left unjudged",
    "vllm-19996-h100-llama31-8b-eagle": "EAGLE speculative decoding: the draft model's weights, activations and one "
    "more KV layer (410,128 tokens = 33 layers) are not modelled",
    "llmd-h100-mistral-small-3.2-24b-v0110": "prints a 2.12 GiB activation peak (4.2 fp32 logits copies) where the "
    "other V1 < 0.17 records print 9.6-9.9: the v0.11.0 image samples top-p/top-k with FlashInfer (on in 0.10-0.11 "
    "wherever FlashInfer is installed), not torch's sort; which install ran is not a setting we take",
    "blog-l4-qwen3-14b-awq-replica": "same settings as blog-l4-qwen3-14b-awq-single, which printed 9.10 GiB; the "
    "author saw 9.10-10.33 GiB depending on start order (scored once, against the mean)",
    "blog-l4-qwen3-14b-awq-single": "0.28 (free-memory drop, Model Runner V2): the 0.49 GiB of persistent memory is "
    "the median of this model's three set-ups",
    "file-80gb-phi4-bnb-lora-util070": "weights 5% high: in-flight bitsandbytes 4-bit with LoRA slots",
}
MARKERS = {"ours": ("circle", "#1f77b4"), "seed article": ("x", "#d62728"), "llm-d": ("diamond", "#2ca02c")}


def table(report: Report, targets: list[tuple[str, float, float, bool]]) -> str:
    lines = [f"{'metric':<22}" + "".join(f"{m:>28}" for m in METHODS),
             f"{'':<22}" + "".join(f"{'n  median    p90     max':>28}" for _ in METHODS)]
    for metric in METRICS:
        cells = [_stats_cell(summary(report.errors(method, metric))) for method in METHODS]
        lines.append(f"{METRIC_LABELS[metric]:<22}" + "".join(f"{c:>28}" for c in cells))
    fits = [report.fits(method) for method in METHODS]
    lines.append(f"{'fits right':<22}" + "".join(f"{f'{r}/{n}':>28}" for r, n in fits))
    lines.append("")
    lines += [f"{'OK ' if ok else 'FAIL'} {what}: {value:.2f} (limit {limit})" for what, value, limit, ok in targets]
    return "\n".join(lines)


def _stats_cell(stats: dict[str, float]) -> str:
    if not stats["n"]:
        return "-"
    return f"{stats['n']:>3} {stats['median']:6.1f}% {stats['p90']:6.1f}% {stats['max']:6.1f}%"


def write_bands(bands: dict, path: Path) -> None:
    path.write_text(json.dumps(bands, indent=1, sort_keys=False) + "\n", encoding="utf-8")


def _verdicts(report: Report) -> str:
    from calculator.engine.uncertainty import verdict

    counts: dict[tuple[str, str], int] = {}
    for row in report.scored():
        outcome = {True: "started", False: "failed", None: "outcome unknown"}[row.case.observed.started]
        key = (outcome, verdict(row.result))
        counts[key] = counts.get(key, 0) + 1
    return "; ".join(f"{outcome}: {n} \"{said}\"" for (outcome, said), n in sorted(counts.items()))


def render_png(report: Report, path: Path) -> None:
    """Predicted vs printed, available KV memory and KV tokens, log axes, one marker per method."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=1, cols=2, subplot_titles=("Available KV memory per GPU (GiB)",
                                                            "KV cache tokens per engine"))
    for column, (metric, observed_of, scale) in enumerate((
            ("available_kv_gib", lambda r: r.case.observed.available_kv_gib, 1.0),
            ("kv_cache_tokens", lambda r: r.case.observed.kv_cache_tokens, 1.0)), start=1):
        rows = [r for r in report.scored() if metric in r.errors.get("ours", {})]
        printed = [observed_of(r) * scale for r in rows]
        for method in METHODS:
            symbol, color = MARKERS[method]
            predicted = [max(getattr(r.predictions[method], metric) or 0, 1e-3) * scale for r in rows]
            figure.add_trace(go.Scatter(x=printed, y=predicted, mode="markers", name=method, legendgroup=method,
                                        showlegend=column == 1, marker={"symbol": symbol, "color": color, "size": 9},
                                        text=[r.case.record_id for r in rows]), row=1, col=column)
        low, high = min(printed) / 1.5, max(printed) * 1.5
        figure.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", name="exact",
                                    line={"color": "gray", "dash": "dot"}, showlegend=column == 1),
                         row=1, col=column)
        figure.update_xaxes(type="log", title_text="printed by vLLM", row=1, col=column)
        figure.update_yaxes(type="log", title_text="predicted", row=1, col=column)
    figure.update_layout(width=1200, height=560, template="plotly_white",
                         title="Predicted vs printed on real vLLM start-ups (benchmarks/data/calibration*.jsonl)")
    figure.write_image(str(path))


VERSION_MATRIX_START = "<!-- version-matrix:start -->"  # benchmarks/version_matrix.py owns this block
VERSION_MATRIX_END = "<!-- version-matrix:end -->"


def with_version_matrix(markdown: str, previous: str) -> str:
    """``markdown`` with the version-matrix block of the previous docs/accuracy.md kept at its end."""
    if VERSION_MATRIX_START not in previous or VERSION_MATRIX_END not in previous:
        return markdown
    block = previous.split(VERSION_MATRIX_START, 1)[1].split(VERSION_MATRIX_END, 1)[0]
    return f"{markdown.rstrip()}\n\n{VERSION_MATRIX_START}{block}{VERSION_MATRIX_END}\n"


def render_markdown(report: Report, targets: list[tuple[str, float, float, bool]], *, png_name: str,
                    bands: dict) -> str:
    scored = report.scored()
    skipped = [row for row in report.rows if row.result is None]
    excluded = [row for row in scored if row.excluded]
    inside, judged = band_coverage(report)
    held_inside, held_judged = band_coverage(report, left_out=SOURCE_OUT)
    out = [
        "# Accuracy on real vLLM start-ups",
        "",
        "Generated by `python benchmarks/accuracy.py` from `benchmarks/data/calibration.jsonl` and "
        "`benchmarks/data/calibration-2026-12.jsonl` (copies of `shared/data/vllm-startup-logs/`: settings and what "
        "vLLM printed, transcribed from public issues, pull requests and files; its README lists the caveats) and "
        "`benchmarks/data/calibration-mined.jsonl` (more records in the same layout, mined for issue 20). Do not "
        "edit by hand.",
        "",
        "Serving speed (TTFT, TPOT, throughput) has its own report: [speed-accuracy.md](speed-accuracy.md).",
        "",
        f"{len(report.rows)} records; {len(scored)} run on a bundled model config, {len(excluded)} of them shown but "
        f"left out of the statistics (listed below); {len(skipped)} have no config (listed at the end, with what is "
        "missing). Figures are per GPU/rank as vLLM prints them (weights, available KV memory, blocks); tokens and "
        "concurrency are per engine. Errors are (predicted - printed) / printed; the statistics are over absolute "
        "errors.",
        "",
        "## Targets (issue 13)",
        "",
        "| target | value | limit | holds |",
        "|---|---:|---:|:---:|",
        *[f"| {what} | {value:.2f} | {limit} | {'yes' if ok else '**no**'} |" for what, value, limit, ok in targets],
        "",
        *_source_out_section(report),
        *_left_out_section(report),
        "## Side by side: our estimate, the seed article's method, llm-d's planner",
        "",
        "Median / p90 / max of |error| in %, with the number of records that print the figure.",
        "",
        "| figure | " + " | ".join(METHODS) + " |",
        "|---|" + "---:|" * len(METHODS),
        *[f"| {METRIC_LABELS[m]} | " + " | ".join(_md_stats(summary(report.errors(method, m))) for method in METHODS)
          + " |" for m in METRICS],
        "| fits / does not fit (right calls) | " + " | ".join(
            f"{right}/{n}" for right, n in (report.fits(method) for method in METHODS)) + " |",
        "",
        "The seed article counts every attention head in the KV cache (no GQA) and no activation or runtime "
        "memory; llm-d uses one activation constant per architecture and engine and no version eras. Both are "
        "implemented in `benchmarks/baselines.py` from `shared/research/competitors.md`.",
        "",
        f"![Predicted vs printed]({png_name})",
        "",
        *findings_sections(report),
        "## KV arithmetic given the printed pool",
        "",
        "The printed `Available KV cache memory` fed into our layout (`--kv-cache-memory-bytes`): blocks, tokens and "
        "concurrency must land on what vLLM printed, within the 0.01 GiB rounding of the printed pool.",
        "",
        "| record | figure | error % | within printing precision |",
        "|---|---|---:|:---:|",
        *[f"| {row.case.record_id}{' (stand-in config, not in the target)' if row.stand_in else ''} | "
          f"{METRIC_LABELS[m]} | {e:+.3f} | {'yes' if ok else '**no**'} |"
          for row in report.rows for m, (e, ok) in row.arithmetic.items()],
        *[f"| {row.case.record_id} | - | - | skipped: {row.arithmetic_skipped} |"
          for row in report.rows if row.arithmetic_skipped],
        "",
        "## Uncertainty bands",
        "",
        "`calculator/data/uncertainty.json`, written by the same run: the 90th percentile of |residual| per budget "
        "term and overhead era (pooled over eras where an era has fewer than 3). The KV band is the larger of the "
        "terms' root-sum-square and the era's end-to-end KV band (`calculator/uncertainty.py`). "
        f"The printed pool lies inside our band for {inside} of {judged} records, and inside the band of the "
        f"estimate refitted without the record's whole source for {held_inside} of {held_judged} (the bands are "
        f"sized from those held-out residuals). Verdicts: {_verdicts(report)}.",
        "",
        "| term | pooled | " + " | ".join(_ERAS) + " |",
        "|---|---:|" + "---:|" * len(_ERAS),
        *[_band_row(term, entry) for term, entry in bands["terms"].items()],
        "",
        "`cudagraph_rel` is shown for information only: the graph figures the records print (pools captured after the "
        "KV cache; llm-d's column even goes negative) are not the estimate vLLM 0.20+ subtracts, so the graph "
        "term's uncertainty is carried by `kv_rel`.",
        "",
        "## Largest residuals",
        "",
        "| record | available KV % | KV tokens % | weights % | what we know |",
        "|---|---:|---:|---:|---|",
        *[_residual_row(row) for row in _largest(report)],
        "",
        "## Every record",
        "",
        "Printed / ours / seed / llm-d. `-` = not printed (or not comparable).",
        "",
        "| record | vLLM (modelled) | weights GiB | available KV GiB | KV tokens | concurrency | started / ours |",
        "|---|---|---|---|---|---|---|",
        *[_record_row(row) for row in scored],
        "",
        "Notes on the modelled versions: " + "; ".join(
            f"`{row.case.record_id}`: {row.case.version_note}" for row in scored if row.case.version_note) + ".",
        "",
        "## Records without a bundled config (not scored)",
        "",
        "What is missing is the checkpoint's own `config.json`; a preset is added only when it can be reconstructed "
        "exactly from an official source.",
        "",
        *[f"- `{row.case.record_id}`: {missing_config(row)}" for row in skipped],
        "",
    ]
    return "\n".join(out)


_ERAS = ("v0_used_memory", "v0", "v1", "v1_0_17")


def _source_out_section(report: Report) -> list[str]:
    """Issue 20: the estimate with every constant refitted without the record's whole source (issue, PR or file)."""
    from benchmarks.accuracy import source_key, source_out_targets

    sources = {source_key(row.record) for row in report.counted()}
    return [
        "## Left out by source (issue 20)",
        "",
        "Each record scored with every overhead constant refitted without all the records of its source "
        f"({len(sources)} sources among the scored records: an issue, a pull request, a file, one author's set of runs), so no figure a "
        "source printed helps predict that source. A constant set by one source alone falls back to the same "
        "constant of the neighbouring era where the mechanism is the same, else to nothing. The KV bands of "
        "`calculator/data/uncertainty.json` are sized from these residuals.",
        "",
        "| target | value | limit | holds |",
        "|---|---:|---:|:---:|",
        *[f"| {what} | {value:.2f} | {limit} | {'yes' if ok else '**no**'} |"
          for what, value, limit, ok in source_out_targets(report)],
        "",
    ]


def _left_out_section(report: Report) -> list[str]:
    """Leave-one-out: which records set a constant, what it becomes without them, and their errors then."""
    moved = [row for row in report.counted() if row.held_out and row.held_out.refitted]
    return [
        "## Left out: each record scored without the constants it helped fit",
        "",
        "The rows \"left out\" above score every record with each overhead constant it helped set refitted without "
        "its set-up (`benchmarks/held_out.py`: the values each record gave, as `calculator/engine/overheads.py` "
        f"cites them); {len(report.counted()) - len(moved)} of the {len(report.counted())} counted records set no "
        "constant and are held out as they are. Weights come from the configs alone (no fitted constant).",
        "",
        "| record | constant refitted without it (GiB, or logits copies) | available KV % | KV tokens % |",
        "|---|---|---:|---:|",
        *[_left_out_row(row) for row in moved],
        "",
    ]


def _left_out_row(row: Row) -> str:
    from benchmarks.accuracy import HELD_OUT
    from benchmarks.held_out import FITS

    used = {fit.constant: fit.used for fit in FITS}
    constants = "; ".join(f"`{name}` {used[name]:.2f} -> {value:.2f}" for name, value in row.held_out.refitted)

    def change(metric: str) -> str:
        before, after = row.errors["ours"].get(metric), row.errors[HELD_OUT].get(metric)
        return "-" if before is None else f"{before:+.2f} -> {after:+.2f}"

    return f"| {row.case.record_id} | {constants} | {change('available_kv_gib')} | {change('kv_cache_tokens')} |"


def _largest(report: Report, count: int = 8) -> list[Row]:
    def worst(row: Row) -> float:
        errors = row.errors.get("ours", {})
        return max((abs(errors[m]) for m in ("available_kv_gib", "kv_cache_tokens", "weights_gib") if m in errors),
                   default=0.0)
    return sorted((row for row in report.scored() if worst(row) > 1.0), key=worst, reverse=True)[:count]


def _residual_row(row: Row) -> str:
    errors = row.errors["ours"]
    cells = [f"{errors[m]:+.1f}" if m in errors else "-"
             for m in ("available_kv_gib", "kv_cache_tokens", "weights_gib")]
    note = RESIDUAL_NOTES.get(row.case.record_id) or (f"stand-in config {row.stand_in.preset}: {row.stand_in.differs}"
                                                      if row.stand_in else "")
    return f"| {row.case.record_id} | " + " | ".join(cells) + f" | {note} |"


def _band_row(term: str, entry: dict) -> str:
    unit = " GiB" if term.endswith("_gib") else ""
    scale = 1 if unit else 100
    suffix = "" if unit else " %"
    cells = [f"{entry['eras'][era]['band'] * scale:.2f}{unit}{suffix} (n={entry['eras'][era]['n']})"
             if era in entry["eras"] else "pooled" for era in _ERAS]
    return (f"| {term} | {entry['pooled'] * scale:.2f}{unit}{suffix} (n={entry['n_pooled']}) | "
            + " | ".join(cells) + " |")


def _md_stats(stats: dict[str, float]) -> str:
    if not stats["n"]:
        return "-"
    return f"{stats['median']:.1f} / {stats['p90']:.1f} / {stats['max']:.1f} (n={stats['n']})"


def _record_row(row: Row) -> str:
    seen = row.case.observed
    preds = [row.predictions[m] for m in METHODS]

    def cell(printed, attribute, fmt):
        values = [fmt(printed) if printed is not None else "-"]
        values += [fmt(getattr(p, attribute)) if getattr(p, attribute) is not None else "-" for p in preds]
        return " / ".join(values)

    gib = "{:.2f}".format
    started = {True: "yes", False: "no", None: "?"}[seen.started]
    return (f"| {row.case.record_id} | {row.case.vllm_version} ({row.era}) | "
            f"{cell(seen.weights_gib, 'weights_gib', gib)} | "
            f"{cell(seen.available_kv_gib, 'available_kv_gib', gib)} | "
            f"{cell(seen.kv_cache_tokens, 'kv_cache_tokens', '{:,}'.format)} | "
            f"{cell(seen.max_concurrency, 'max_concurrency', gib)} | {started} / "
            f"{'yes' if row.predictions['ours'].fits else 'no'} |")
