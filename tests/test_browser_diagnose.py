"""A real browser (Debian's Chromium) on `streamlit run app.py`: a failed start-up pasted into the Diagnose page is
explained, its memory drawn twice, its fixes listed and its calibrated Plan link opens the Plan page. The screenshot
is the README's picture of a diagnosed out-of-memory start."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from support.dashboard import SCREENSHOTS, choose, wait_idle

OOM = (Path(__file__).parent / "data" / "vllm-startup-logs" / "records"
       / "llmd-h100-llama33-70b-fp8-tp1-failed.log").read_text()


def test_a_pasted_oom_is_diagnosed_and_its_link_opens_the_calibrated_plan(dashboard, browser):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1440, "height": 2000})
    page.goto(f"{dashboard}/diagnose", wait_until="networkidle")
    choose(page, "GPU it ran on", "H100 SXM 80GB")
    version = page.get_by_label("vLLM version (when the log does not print it)")
    version.fill("0.11.0")
    version.press("Enter")
    wait_idle(page)
    box = page.get_by_label("vLLM log")
    box.fill(OOM)
    box.press("Control+Enter")
    failed = page.locator('[data-testid="stAlert"]').filter(has_text="It failed")
    failed.wait_for(timeout=120_000)
    assert "No available memory for the cache blocks" in failed.inner_text()
    page.locator(".js-plotly-plot").filter(has_text="what vLLM printed vs the estimate").wait_for(timeout=60_000)
    page.get_by_text("Changes that make it start", exact=True).wait_for(timeout=60_000)
    wait_idle(page)
    page.screenshot(path=str(SCREENSHOTS / "diagnose-oom.png"), full_page=True)
    link = page.get_by_role("link", name="Open the Plan page calibrated to this machine")
    query = parse_qs(urlsplit(link.get_attribute("href")).query)
    assert query["m"] == ["RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"] and query["len"] == ["16000"]
    assert "adj" in query
    plan = browser.new_page(viewport={"width": 1440, "height": 1000})
    plan.goto(link.get_attribute("href"), wait_until="networkidle")
    plan.locator("h1", has_text="Plan").wait_for(timeout=60_000)
    wait_idle(plan)
    assert parse_qs(urlsplit(plan.url).query)["adj"] == query["adj"]  # the Plan page kept the calibration
    plan.close()
    page.close()
