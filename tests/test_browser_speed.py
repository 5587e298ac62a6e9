"""A real browser (Debian's Chromium) on `streamlit run app.py`: the Plan page's Speed section and the Recommend
page, whose rows open the Plan page with their deployment. The screenshots are the README's pictures of both."""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

from support.dashboard import SCREENSHOTS, metric, wait_idle

RECOMMEND = {"m": "meta-llama/Llama-3.1-70B-Instruct", "in": "2000", "out": "300", "users": "200", "ttft": "1500",
             "itl": "40", "gpus": "h100-sxm-80gb,h200-141gb,a100-sxm-80gb,l40s-48gb,mi300x-192gb"}


def query(url: str) -> dict[str, str]:
    return {key: values[-1] for key, values in parse_qs(urlsplit(url).query).items()}


def test_the_speed_section_shows_its_kpis_and_the_two_ceilings(dashboard, browser):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1440, "height": 1150})
    link = {"m": "meta-llama/Llama-3.1-8B-Instruct", "in": "2000", "out": "300", "users": "500", "ttft": "1500",
            "itl": "40"}
    page.goto(f"{dashboard}/?{urlencode(link)}", wait_until="networkidle")
    assert metric(page, "Tokens/s per user")
    heading = page.locator("[data-testid=stMain] h3").filter(has_text="Speed").first
    heading.scroll_into_view_if_needed()
    chart = page.locator(".js-plotly-plot").filter(has_text="Two ceilings")
    chart.wait_for(timeout=60_000)
    assert "KV cache:" in chart.inner_text() and "max_num_seqs:" in chart.inner_text()
    assert "ITL SLO 40 ms" in chart.inner_text()
    wait_idle(page)
    heading.evaluate("e => e.scrollIntoView({block: 'start'})")  # the main area scrolls, not the window
    page.wait_for_timeout(500)
    assert abs(heading.bounding_box()["y"]) < 120
    page.screenshot(path=str(SCREENSHOTS / "speed.png"))
    assert query(page.url)["ttft"] == "1500" and query(page.url)["itl"] == "40"
    page.close()


def test_recommend_ranks_deployments_and_a_row_opens_the_plan_page(dashboard, browser):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1440, "height": 1400})
    page = context.new_page()
    page.goto(f"{dashboard}/recommend?{urlencode(RECOMMEND)}", wait_until="networkidle")
    table = page.locator('[class*="st-key-ranked"] table')
    table.wait_for(timeout=120_000)
    page.locator(".js-plotly-plot").filter(has_text="Pareto front").wait_for(timeout=60_000)
    wait_idle(page)
    page.screenshot(path=str(SCREENSHOTS / "recommend.png"))
    first_row = table.locator("tbody tr").first
    deployment = first_row.locator("td").nth(1).inner_text().strip()  # "H100 SXM 80GB · TP 2 · fp8 · KV fp8"
    gpu_name, tp = deployment.split(" · ")[:2]
    link = first_row.get_by_role("link", name="Open in Plan")
    if link.get_attribute("target") == "_blank":
        with context.expect_page() as opened:
            link.click()
        plan = opened.value
    else:
        link.click()
        plan = page
    plan.wait_for_load_state("networkidle")
    plan.locator("h1", has_text="Plan").wait_for(timeout=60_000)
    header = plan.locator('[class*="st-key-deployment_header"]').inner_text(timeout=60_000)
    assert f"{gpu_name} × " in header and f"· {tp} / PP" in header  # "H100 SXM 80GB × 2 · TP 2 / PP 1"
    opened_link = query(plan.url)
    assert (opened_link["m"], opened_link["users"], opened_link["in"], opened_link["ttft"]) == (
        RECOMMEND["m"], "200", "2000", "1500")
    assert metric(plan, "Tokens/s per user")
    context.close()
