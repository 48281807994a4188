"""Open a report in headless Chromium and collect what a reader would see."""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def require_chromium() -> tuple[str, str]:
    """Chromium and chromedriver, or a skip (a failure where CI demands the browser)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser and driver:
        return browser, driver
    message = "headless Chromium is not installed (Debian: chromium chromium-driver)"
    if os.environ.get("KVTRACE_REQUIRE_BROWSER"):
        pytest.fail(message)
    pytest.skip(message)


# Every element that reaches past the right edge of its section (the card a reader
# sees), unless it is inside a box that scrolls (a wide table, the SQL); and the page
# itself when it is wider than the window.
OVERFLOWS = """
const found = [];
document.querySelectorAll('section').forEach(section => {
  const edge = section.getBoundingClientRect().right + 1;
  section.querySelectorAll('*').forEach(element => {
    if (element.closest('.table-scroll, pre, details:not([open]) > :not(summary)')) return;
    const box = element.getBoundingClientRect();
    if (box.width > 0 && box.right > edge) {
      found.push(section.id + ' ' + element.tagName + ' "'
        + (element.textContent || '').trim().slice(0, 40) + '" by '
        + Math.round(box.right - edge) + ' px');
    }
  });
});
const page = document.documentElement;
if (page.scrollWidth > page.clientWidth + 1) found.push('the page is wider than the window');
return found;
"""


@dataclass
class Opened:
    figures: list[dict]  # per chart container: rendered, error, marks
    console_errors: list[str]
    requests: list[str]  # every URL the page asked for, the page itself excluded
    alerts: bool
    scripts: int
    texts: list[str]  # text of every table cell
    overflows: list[str]  # what sticks out of its section, or the page out of the window


def open_report(path: Path, screenshot: Path) -> Opened:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    browser, driver_path = require_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="kvtrace-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument("--window-size=1280,1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        url = path.resolve().as_uri()
        driver.get(url)
        WebDriverWait(driver, 60).until(
            lambda d: d.execute_script(
                "return [...document.querySelectorAll('[data-spec]')]"
                ".every(b => b.dataset.rendered || b.dataset.error)"
            )
        )
        figures = driver.execute_script("""
            return [...document.querySelectorAll('[data-spec]')].map(b => ({
              id: b.id, rendered: b.dataset.rendered === 'true', error: b.dataset.error || '',
              marks: b.querySelectorAll('svg g.mark-rect path, svg g.mark-line path,'
                + ' svg g.mark-area path, svg g.mark-symbol path').length,
              points: b.querySelectorAll('svg g.mark-symbol.role-mark path').length}));""")
        texts = driver.execute_script(
            "return [...document.querySelectorAll('td')].map(c => c.textContent);"
        )
        scripts = driver.execute_script("return document.scripts.length;")
        overflows = driver.execute_script(OVERFLOWS)
        alerts = True
        try:
            driver.switch_to.alert  # noqa: B018 - raises when no alert is open
        except Exception:
            alerts = False
        console = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        requests = []
        for entry in driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] != "Network.requestWillBeSent":
                continue
            params = message["params"]
            asked = params["request"]["url"]
            if params.get("documentURL") == url and asked != url:  # not the browser's own
                requests.append(asked)
        height = driver.execute_script("return document.documentElement.scrollHeight;")
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {
                "width": 1280,
                "height": min(int(height), 16000),
                "deviceScaleFactor": 1,
                "mobile": False,
            },
        )
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        return Opened(figures, console, requests, alerts, scripts, texts, overflows)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
