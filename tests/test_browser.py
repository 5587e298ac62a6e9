"""A real browser (Debian's Chromium driven by Playwright) against `streamlit run app.py` on localhost.

Opens the Plan page, changes the model and a slider, sees the KPIs and the chart change, opens the share
link in a new page and sees the same numbers. Screenshots land in docs/screenshots/ (the README uses them).
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect
from support.dashboard import SCREENSHOTS, DashboardError, chromium, metric, running_dashboard, wait_idle


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    try:
        with running_dashboard(tmp_path_factory.mktemp("streamlit") / "streamlit.log") as url:
            yield url
    except DashboardError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def browser():
    try:
        with chromium() as instance:
            yield instance
    except DashboardError as exc:
        pytest.fail(str(exc), pytrace=False)


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def test_plan_page_reacts_and_its_link_reproduces_the_view(dashboard, browser):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1440, "height": 1800})
    page.goto(dashboard, wait_until="networkidle")
    first_tokens = metric(page, "KV cache tokens")
    page.locator('.js-plotly-plot .main-svg').first.wait_for(timeout=60_000)
    page.screenshot(path=str(SCREENSHOTS / "plan.png"), full_page=False)

    # Change the model through the searchable preset box.
    preset = page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').first
    preset.click()
    page.keyboard.type("Qwen3-8B")
    page.get_by_role("option", name="Qwen/Qwen3-8B", exact=True).click()
    wait_idle(page)
    page.wait_for_function("(old) => [...document.querySelectorAll('[data-testid=stMetricValue]')]"
                           ".some(e => e.innerText.trim() !== old)", arg=first_tokens, timeout=60_000)
    qwen_tokens = metric(page, "KV cache tokens")
    assert qwen_tokens != first_tokens

    # Take over gpu_memory_utilization and move the slider down with the keyboard.
    # The slider is enabled only once the rerun that the checkbox started has finished; keys pressed on the
    # still-disabled slider are lost, so wait for it (and for the explicit u=1 in the address) first.
    page.get_by_text("Default gpu_memory_utilization").click()
    page.wait_for_url(lambda url: query(url).get("u") == ["1"], timeout=60_000)
    wait_idle(page)
    slider = page.locator('[data-testid="stSlider"] input[type="range"]').first
    expect(slider).to_be_enabled(timeout=60_000)
    slider.focus()
    for _ in range(10):
        page.keyboard.press("ArrowLeft")
    page.wait_for_url(lambda url: query(url).get("u") == ["0.9"], timeout=60_000)
    wait_idle(page)
    page.wait_for_function("(old) => [...document.querySelectorAll('[data-testid=stMetricValue]')]"
                           ".every(e => e.innerText.trim() !== old)", arg=qwen_tokens, timeout=60_000)
    tokens, concurrency = metric(page, "KV cache tokens"), metric(page, "Max concurrency")
    assert tokens != qwen_tokens
    assert query(page.url)["m"] == ["Qwen/Qwen3-8B"] and query(page.url)["u"] == ["0.9"]
    page.screenshot(path=str(SCREENSHOTS / "plan-after-changes.png"), full_page=True)

    # The address bar is the share link: a fresh page shows the same numbers.
    shared = browser.new_page(viewport={"width": 1440, "height": 1200})
    shared.goto(page.url, wait_until="networkidle")
    assert metric(shared, "KV cache tokens") == tokens
    assert metric(shared, "Max concurrency") == concurrency
    shared.close()
    page.close()


def test_compare_page_renders_side_by_side(dashboard, browser):
    page = browser.new_page(viewport={"width": 1440, "height": 1400})
    page.goto(f"{dashboard}/compare", wait_until="networkidle")
    page.locator('.js-plotly-plot .main-svg').first.wait_for(timeout=60_000)
    page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=60_000)
    page.screenshot(path=str(SCREENSHOTS / "compare.png"), full_page=True)
    page.close()


def test_every_route_shows_the_same_menu_and_its_links_work(dashboard, browser):
    # A deep link runs the page as a legacy pages/ app (without app.py); it must look and link the same.
    menu = ["Plan", "Compare", "Live server", "Fleet", "Learn", "GPUs"]
    for path in ("/", "/compare", "/learn"):
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{dashboard}{path}", wait_until="networkidle")
        links = page.locator('[data-testid="stSidebar"] [data-testid="stPageLink"]')
        links.first.wait_for(timeout=60_000)
        assert [text.splitlines()[-1] for text in links.all_inner_texts()] == menu  # "🧮\n\nPlan" -> "Plan"
        assert page.locator('[data-testid="stSidebarNav"]').count() == 0  # no menu of bare file names
        page.get_by_role("link", name="GPUs").click()
        page.wait_for_url(f"{dashboard}/gpu", timeout=60_000)
        page.locator("h1", has_text="GPUs").wait_for(timeout=60_000)
        page.close()
