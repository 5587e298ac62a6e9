"""A real browser (Debian's Chromium driven by Playwright) against `streamlit run app.py` on localhost.

Opens the Plan page, changes the model and a slider, sees the KPIs and the chart change, opens the share
link in a new page and sees the same numbers. Screenshots land in docs/screenshots/ (the README uses them).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

REPO = Path(__file__).resolve().parents[1]
SCREENSHOTS = REPO / "docs" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("streamlit") / "streamlit.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    with open(log, "w") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true"],
            cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: `make test` installs Debian's chromium package")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


def metric(page, label: str) -> str:
    """The value of the st.metric whose label starts with ``label``."""
    card = page.locator('[data-testid="stMetric"]').filter(has=page.locator(
        '[data-testid="stMetricLabel"]', has_text=label))
    return card.locator('[data-testid="stMetricValue"]').first.inner_text(timeout=60_000).strip()


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def wait_idle(page) -> None:
    """Wait until Streamlit has finished the current run (the status widget disappears)."""
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="detached", timeout=60_000)


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
