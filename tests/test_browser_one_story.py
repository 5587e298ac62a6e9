"""A real browser walks one team's plan (issues 24 and 26): Llama-3.1-70B-Instruct on 2 x H100 at 32k for 200 users.
Everything on each page must agree: the figures of a server vLLM refuses are struck out and its command carries the
fix or says it will not start; the sweep's fit boundary is the headline's largest max_model_len; a deployment that
starts has one GPU count on the page; Compare shows that same plan for the same settings; a phone sees the
Recommend table as cards with the deployment kept."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from support.dashboard import metric, wait_idle

from calculator import Scenario, Workload
from calculator.url_state import to_query_params

REFUSED = Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="h100-sxm-80gb", tensor_parallel_size=2,
                   max_model_len=32768)
STARTS = REFUSED.replace(quantization="fp8")
TEAM = Workload(prompt_tokens_mean=2000, output_tokens_mean=500, target_concurrent_requests=200)


def main_text(page) -> str:
    return page.locator("[data-testid=stMain]").inner_text()


def test_one_plan_one_story_across_plan_and_compare(dashboard, browser):
    page = browser.new_page(viewport={"width": 1440, "height": 1800})
    page.goto(f"{dashboard}/?{urlencode(to_query_params(REFUSED, TEAM))}", wait_until="networkidle")
    headline = metric(page, "Largest max_model_len")
    assert headline == "24,384"
    for label in ("KV cache tokens", "Max concurrency", "Workload concurrency", "GPU blocks"):
        assert metric(page, label) == "—"  # a server that does not start shows none of its figures
    command = page.locator("[data-testid=stCode]").filter(has_text="vllm serve").first.inner_text()
    assert "--max-model-len 24384" in command  # the fix picked by default, so the command starts
    sweep = page.locator(".js-plotly-plot").filter(has_text="fit boundary")
    sweep.first.wait_for(timeout=60_000)
    assert f"fit boundary: {headline}" in sweep.first.inner_text()
    assert not re.search(r"Plan: [\d,]+ replicas?", main_text(page))  # no plan for a server that does not start

    page.goto(f"{dashboard}/?{urlencode(to_query_params(STARTS, TEAM))}", wait_until="networkidle")
    metric(page, "TTFT p95")
    wait_idle(page)
    text = main_text(page)
    plans = re.findall(r"Plan: ([\d,]+ replicas? × \d+ GPU\(s\) = [\d,]+ GPUs?)", text)
    assert len(plans) == 1, plans  # one GPU count for the load
    assert "Capacity plan for" not in text
    plan_ttft, plan_itl = metric(page, "TTFT p95"), metric(page, "ITL")
    page.close()

    compare = browser.new_page(viewport={"width": 1440, "height": 1800})
    params = {f"a.{key}": value for key, value in to_query_params(STARTS).items()}
    compare.goto(f"{dashboard}/compare?{urlencode({**params, 'users': '200', 'in': '2000', 'out': '500'})}",
                 wait_until="networkidle")
    table = compare.locator("[data-testid=stTable]")
    table.wait_for(timeout=60_000)
    cells = [[c.inner_text().strip() for c in row.locator("td").all()] for row in table.locator("tbody tr").all()]
    rows = {row[0]: row[1:] for row in cells}  # figure -> one value per scenario, A first
    assert rows["plan: replicas × GPUs"][0].startswith(f"{plans[0]} (")  # the same words for the same count
    assert (rows["TTFT p95"][0], rows["ITL"][0]) == (plan_ttft, plan_itl)
    compare.close()


def test_recommend_on_a_phone_shows_cards_that_keep_the_deployment(dashboard, browser):
    page = browser.new_page(viewport={"width": 390, "height": 844})
    link = {"m": "meta-llama/Llama-3.1-70B-Instruct", "in": "2000", "out": "500", "users": "200",
            "gpus": "h100-sxm-80gb,gh200-96gb"}
    page.goto(f"{dashboard}/recommend?{urlencode(link)}", wait_until="networkidle")
    table = page.locator('[class*="st-key-ranked"] table')
    table.wait_for(timeout=120_000)
    wait_idle(page)
    # 783 px before: TTFT, ITL and $/M sat off-screen. (The page's style can land a frame after the table.)
    page.wait_for_function("() => document.querySelector('[class*=st-key-ranked] table')"
                           ".getBoundingClientRect().width <= 390", timeout=15_000)
    card = table.locator("tbody tr").first
    cells = card.locator("td")
    assert " · TP " in cells.nth(1).inner_text()  # the deployment's name, on the card
    labels = [cells.nth(i).evaluate("e => getComputedStyle(e, '::before').content") for i in (7, 8, 9, 10)]
    assert labels == ['"TTFT p95: "', '"TTFT p95 band: "', '"SLO: "', '"ITL: "']  # each figure named on its line
    # name, TTFT, its band, the SLO status, ITL, "Open in Plan"
    for cell in (cells.nth(1), cells.nth(7), cells.nth(8), cells.nth(9), cells.nth(10), cells.nth(12)):
        box = cell.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390
