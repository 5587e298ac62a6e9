"""The real app under test: `streamlit run app.py` on localhost, started the way `make dashboard` starts it (imports
warmed first, pages/common/launch.py), and Debian's Chromium driven by Playwright."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "docs" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
# NOTE: without the background-networking flags Chromium keeps dialling Google on this closed network.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Installed before the page's own scripts: stamps the first frame that shows the deployment header and the first
# KPI value. Timed inside the page because a test driver's own polling waits while the page's main thread is busy
# (evaluating Plotly, say) and would report that instead of what was on screen.
STAMP_FIRST_PAINTS = """(() => {
  window.__firstPaint = {};
  const stamp = (name, selector) => {
    if (window.__firstPaint[name] === undefined && document.querySelector(selector)) {
      window.__firstPaint[name] = null;
      requestAnimationFrame(() => { window.__firstPaint[name] = performance.now(); });
    }
  };
  new MutationObserver(() => {
    stamp('header', '.st-key-deployment_header');
    stamp('kpi', '[data-testid=stMetricValue]');
  }).observe(document, {subtree: true, childList: true});
})()"""


class DashboardError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_dashboard(log: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """Starts the dashboard offline on a free port; yields its base URL; stops it afterwards."""
    port = free_port()
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false", **(env or {})}
    with open(log, "w") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "pages.common.launch", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true"],
            cwd=REPO, env=environment, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
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
                raise DashboardError(f"streamlit did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@contextlib.contextmanager
def chromium():
    """A headless Debian Chromium under Playwright (no browser download: `make test` installs the package)."""
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        raise DashboardError(f"Chromium not found at {CHROMIUM}: `make test` installs Debian's chromium package")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


def metric(page, label: str) -> str:
    """The value of the st.metric whose label starts with ``label``."""
    card = page.locator('[data-testid="stMetric"]').filter(has=page.locator(
        '[data-testid="stMetricLabel"]', has_text=label))
    return card.locator('[data-testid="stMetricValue"]').first.inner_text(timeout=60_000).strip()


def wait_idle(page) -> None:
    """Wait until Streamlit has finished the current run (the status widget disappears)."""
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="detached", timeout=60_000)


def open_expander(page, label: str):
    """Open the expander titled ``label`` and wait until it has finished opening; returns it.

    NOTE: Streamlit opens an expander with a Web Animation of about 0.5 s. A run that starts near its end (the text
    area's blur, which a press on the button below it causes) drops the expander's content for one frame, and the
    element below slides under the pointer. A synthetic click, 5-15 ms from press to release, can be released there
    and is lost (the browser sends the click to the common ancestor, not to the button): seen in 1 of 60 double
    clicks in the worst-moments import test, reproduced with a blur 440 ms after opening. A person's press lasts many
    frames, so the clicks under test wait for the opening to end instead."""
    expander = page.locator('[data-testid="stExpander"]').filter(has_text=label).first
    expander.locator("summary").click()
    page.wait_for_function("e => e.querySelector('details[open]') && e.getAnimations({subtree: true}).length === 0",
                           arg=expander.element_handle(timeout=60_000), timeout=60_000)
    return expander


def choose(page, label: str, option: str) -> None:
    """Pick ``option`` in the selectbox labelled ``label`` by typing into its search box."""
    box = page.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text(label, exact=True))
    box.click()
    page.keyboard.type(option)
    page.get_by_role("option", name=option, exact=True).click()
    wait_idle(page)
