"""Seeded fuzz of share links: every generated Plan or Compare link either round-trips or names what it changed.

Bounded: 400 Plan links and 120 Compare links from a fixed seed, a mix of values the engine accepts (edges
included), spellings it resolves (nvidia-smi GPU names, dtype words, version forms), tiny positive floats (5e-324,
1e-300) and garbage, in every key: the deployment's, the workload's and the speed section's. For each link:
reading never raises; every key whose value does not come back unchanged is named in a warning (or is a known
spelling resolved to its canonical form); the engine then either estimates or raises a CalculatorError, never
anything else, and the speed plan's numbers are finite. Cross-field failures drop only the field they blame; a
catalog GPU takes a link's bandwidth and TFLOPS. A sample goes through the real pages (AppTest) and must draw
without an exception, showing no nan.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import streamlit as st
from pydantic import TypeAdapter
from streamlit.testing.v1 import AppTest

from calculator import CalculatorError, Workload, estimate, find_gpu, preset_ids
from calculator.serve_command import DTYPE_NAMES
from calculator.speed.inputs import speed_plan
from calculator.url_state import SCENARIO_KEYS, SPEED_KEYS, WORKLOAD_KEYS, read_link, to_query_params

ROOT = Path(__file__).resolve().parents[1]
SEED = 20261203
TINY = ["5e-324", "1e-300"]  # the smallest positive double, and a value that underflows once divided or squared
GARBAGE = ["", "-1", "0", "abc", "1e400", "nan", "inf", "1.5", "99999999999", "none", "None", "true", " 4", "0x10",
           "½", *TINY]
VALUES: dict[str, list[str]] = {
    "m": [*preset_ids()[:12], "nobody/none"],
    "g": ["h100-sxm-80gb", "NVIDIA H100 80GB HBM3", "a100_80gb", "l40s", "NVIDIA L4", "tpu-v5", "h100-80gbX", "none"],
    "mem": ["24", "47.5", "0.25", "5000", "9999", "10001", "0"], "dev": ["cuda", "rocm", "cpu", "tpu"],
    "tp": ["1", "2", "3", "8", "64", "1024", "1025"], "pp": ["1", "2", "4", "1024"], "dp": ["1", "2", "8", "1025"],
    "u": ["0.01", "0.1", "0.3", "0.9", "1", "1.01"], "len": ["1", "4096", "32768", "50000000", "100000001"],
    "seqs": ["1", "64", "500000", "1000000", "1000001"], "mbt": ["1", "8192", "50000000", "100000001"],
    "bs": ["1", "16", "32", "4096", "4097"], "dt": ["auto", "half", "bf16", "float", "float16", "int3"],
    "kv": ["auto", "fp8", "fp8_e5m2", "fp8_ds_mla", "int3"], "q": ["fp8", "awq", "gptq_marlin", "awq4", "none"],
    "kvb": ["8589934592", "0", "1"], "blocks": ["1", "1000", "0"], "eager": ["0", "1"], "ext": ["0", "1"],
    "async": ["0", "1"], "ep": ["0", "1"], "pc": ["0", "1"],
    "v": ["0.34.0", "0.32", "v0.8.5", "0.6.3.post1", "99.0", "0.35.0", "0.3.0", "1e20.0"],
    "other": ["0", "2.5", "5000", "10001"], "adj": ["-1.5", "0.25", "1000", "1001"], "offload": ["0", "2.5", "100001"],
    "in": ["1", "2000", "10000000"], "out": ["0", "300", "10000001"], "in95": ["4000"], "out95": ["600"],
    "prefix": ["0", "512", "5000"], "n": ["1", "4", "1024", "1025"], "users": ["1", "64", "10000000"],
    "rate": ["0.000001", "0.5", "12", "1000000", "1000001"], "ttft": ["0.001", "500", "none"],
    "itl": ["0.001", "5", "50", "none"], "toks": ["0.001", "20", "1000000"], "e2e": ["0.000001", "30"],
    "price": ["0.01", "2.123456789", "9999", "10000"], "bw": ["1", "50", "3350", "1000000"],
    "tflops": ["0.001", "1", "989.5", "1000000"], "mbu": ["0.000001", "0.5", "1"], "mfu": ["0.000001", "0.5", "1"],
}
KEY_TO_FIELD = {key: field for field, key in {**SCENARIO_KEYS, **WORKLOAD_KEYS, **SPEED_KEYS}.items()}


def random_link(rng: random.Random) -> dict[str, str]:
    keys = rng.sample(sorted(VALUES), rng.randint(1, 8))
    link = {key: rng.choice(VALUES[key] + ([rng.choice(GARBAGE)] if rng.random() < 0.15 else [])) for key in keys}
    if rng.random() < 0.1:
        link[rng.choice(["zzz", "token", "view", "sweep"])] = "x"
    return link


def resolved_spelling(key: str, asked: str, written: str) -> bool:
    """A value written back in its canonical form, with the same meaning (not a silent change)."""
    if key == "g":
        try:
            return find_gpu(asked).key == written
        except CalculatorError:
            return False
    if key == "dt":
        return DTYPE_NAMES.get(asked.lower()) == written
    if key == "v":
        return written.split(".")[:2] == asked.lstrip("v").split(".")[:2]
    words = {"true": "1", "false": "0", "yes": "1", "no": "0", "on": "1", "off": "0"}
    if asked.strip().lower() in words:
        return words[asked.strip().lower()] == written
    try:
        return float(asked) == float(written)
    except ValueError:
        return False


def reads_as_default(key: str, asked: str, state) -> bool:
    """Whether ``asked`` means the field's default (so not writing it back changes nothing)."""
    model = state.scenario if key in SCENARIO_KEYS.values() else state.workload if key in WORKLOAD_KEYS.values() \
        else state.speed
    info = type(model).model_fields[KEY_TO_FIELD[key]]
    if asked.strip().lower() == "none":  # links read none in any case
        return info.default is None
    if info.default is not None and resolved_spelling(key, asked, str(info.default)):
        return True
    try:
        return TypeAdapter(info.annotation).validate_python(asked) == info.default
    except ValueError:
        return False


def check_link(link: dict[str, str]) -> None:
    state = read_link(link)  # never raises
    written = to_query_params(state.scenario, state.workload, speed=state.speed)
    named = " ".join(state.warnings)
    for key, asked in link.items():
        if key not in KEY_TO_FIELD:
            continue
        back = written.get(key)
        # back is None: what was read equals the field's default (pydantic reads "0" as False, "none" as None)
        unchanged = back == asked or resolved_spelling(key, asked, back) if back is not None else \
            reads_as_default(key, asked, state)
        assert unchanged or f"{key}=" in named or "Unknown GPU" in named or "inconsistent" in named or \
            (key == "v" and "newer than" in named), (link, key, back, state.warnings)
    try:
        result = estimate(state.scenario)
        plan = speed_plan(result, state.workload, state.speed)
    except CalculatorError:
        return  # a clear message the page shows; anything else is a bug
    assert all(math.isfinite(x) or x == math.inf for x in numbers(plan.model_dump())), link


def numbers(value: object):
    """Every float in a dumped model (inf is how the speed model says "saturated"; nan never is)."""
    if isinstance(value, float):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from numbers(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from numbers(item)


@pytest.mark.parametrize("batch", range(8))
def test_plan_links_round_trip_or_warn(batch):
    rng = random.Random(SEED + batch)
    for _ in range(50):
        check_link(random_link(rng))


@pytest.mark.parametrize("batch", range(3))
def test_compare_links_round_trip_or_warn(batch):
    rng = random.Random(SEED + 100 + batch)
    for _ in range(40):
        for letter in "abcd"[: rng.randint(2, 4)]:
            check_link(random_link(rng))


@pytest.fixture()
def fresh_caches():
    st.cache_data.clear()


@pytest.mark.parametrize("index", range(12))
def test_generated_links_draw_the_real_pages_without_an_exception(index, fresh_caches):
    rng = random.Random(SEED + 1000 + index)
    plan = random_link(rng)
    plan["m"] = rng.choice(preset_ids()[:12])  # Hub ids would go to the network
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, value in plan.items():
        app.query_params[key] = value
    app.run()
    assert not app.exception, (plan, [e.value for e in app.exception])
    assert " nan" not in shown_text(app) and "$nan" not in shown_text(app), plan
    compare = {"k": rng.choice(["2", "3", "4", "9"]),
               **{f"{letter}.{key}": value for letter in "ab" for key, value in random_link(rng).items()}}
    app = AppTest.from_file(str(ROOT / "pages" / "compare.py"), default_timeout=120)
    for key, value in compare.items():
        app.query_params[key] = value
    app.run()
    assert not app.exception, (compare, [e.value for e in app.exception])


NUMBER_KEYS = sorted(key for key in KEY_TO_FIELD if key not in ("m", "g", "dev", "dt", "kv", "q", "v"))


def shown_text(app: AppTest) -> str:
    return " ".join([*(m.value for m in app.metric), *(m.value for m in app.markdown), *(c.value for c in app.caption)])


@pytest.mark.parametrize("tiny", TINY)
def test_tiny_positive_floats_in_every_numeric_link_field_round_trip_or_warn(tiny):
    for key in NUMBER_KEYS:
        check_link({key: tiny})
        check_link({key: tiny, "rate": "1"})  # and under a request rate, which replicas divide


@pytest.mark.parametrize("key", NUMBER_KEYS)
def test_the_smallest_double_in_any_field_draws_the_plan_page(key, fresh_caches):
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    app.query_params[key] = "5e-324"
    app.query_params["rate"] = app.query_params.get("rate") or "1"
    app.run()
    assert not app.exception, (key, [e.value for e in app.exception])
    state = read_link({key: "5e-324"})
    kept = to_query_params(state.scenario, state.workload, speed=state.speed).get(key) == "5e-324"
    # NOTE: a bound of ">= 0" (other processes' memory, CPU offload, the calibration) takes it as the tiny amount it is
    assert kept or any(f"{key}='5e-324'" in w.value for w in app.warning), key
    assert " nan" not in shown_text(app) and "$nan" not in shown_text(app), key


RECOMMEND_NUMBER_KEYS = ("in", "out", "in95", "out95", "users", "rate", "ttft", "itl", "toks", "e2e", "maxg",
                         "budget", "len")


@pytest.mark.parametrize("key", RECOMMEND_NUMBER_KEYS)
def test_the_smallest_double_in_any_field_draws_the_recommend_page(key, fresh_caches):
    app = AppTest.from_file(str(ROOT / "pages" / "recommend.py"), default_timeout=120)
    for name, value in {"gpus": "h100,l40s", key: "5e-324"}.items():
        app.query_params[name] = value
    app.run()
    assert not app.exception, (key, [e.value for e in app.exception])
    named = any(f"{key}='5e-324'" in w.value for w in app.warning)
    # NOTE: a budget of 5e-324 dollars an hour is a real, if hopeless, limit: every deployment is over it.
    assert named or (key == "budget" and "budget" in str(app.dataframe[0].value.to_dict())), key


# (the clash, the key it blames, keys left out of the rest of the link because they would settle the clash)
CROSS_FIELD = [
    ({"g": "none"}, "g", ("mem", "dev")),
    ({"g": "None", "dev": "cuda"}, "g", ("mem",)),
    ({"in": "100", "prefix": "200"}, "prefix", ("in95",)),
    ({"in": "1", "prefix": "5000"}, "prefix", ("in95",)),
]


@pytest.mark.parametrize("batch", range(3))
def test_a_cross_field_failure_drops_only_the_field_it_blames(batch):
    rng = random.Random(SEED + 200 + batch)
    for _ in range(40):
        clash, blamed, settles = rng.choice(CROSS_FIELD)
        others = {k: v for k, v in random_link(rng).items() if k not in clash and k not in settles}
        link = {**others, **clash}
        state = read_link(link)
        without = read_link({k: v for k, v in link.items() if k != blamed})
        assert (state.scenario, state.workload, state.speed) == (without.scenario, without.workload, without.speed), \
            link
        assert any(w.startswith(f"ignored link value {blamed}=") for w in state.warnings), (link, state.warnings)
        assert not any(w.startswith("ignored link value m=") for w in state.warnings), link  # the model stays


CATALOG_GPUS = ["h100-sxm-80gb", "NVIDIA A100-SXM4-80GB", "l40s", "NVIDIA L4", "mi300x"]


@pytest.mark.parametrize("batch", range(2))
def test_a_catalog_gpu_takes_a_links_bandwidth_and_tflops(batch):
    rng = random.Random(SEED + 300 + batch)
    for _ in range(20):
        gpu, bw, tflops = rng.choice(CATALOG_GPUS), rng.choice(VALUES["bw"]), rng.choice(VALUES["tflops"])
        state = read_link({"g": gpu, "bw": bw, "tflops": tflops})
        assert state.warnings == ()
        rated = state.speed.with_gpu_rates(estimate(state.scenario))
        assert (rated.gpu.key, rated.gpu.memory_bandwidth_gb_s, rated.gpu.bf16_dense_tflops) == (
            find_gpu(gpu).key, float(bw), float(tflops))


@pytest.mark.parametrize("index", range(3))
def test_a_catalog_gpu_override_reaches_the_plan_pages_numbers(index, fresh_caches):
    from calculator.units import format_ms

    rng = random.Random(SEED + 400 + index)
    link = {"g": rng.choice(CATALOG_GPUS[:4]), "bw": rng.choice(VALUES["bw"]), "tflops": rng.choice(VALUES["tflops"])}
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, value in link.items():
        app.query_params[key] = value
    app.run()
    assert not app.exception, (link, [e.value for e in app.exception])
    state = read_link(link)
    plan = speed_plan(estimate(state.scenario), state.workload, state.speed).ceilings.plan
    assert {m.label: m.value for m in app.metric}["TTFT p95"] == format_ms(plan.per_replica.ttft_p95_ms), link
