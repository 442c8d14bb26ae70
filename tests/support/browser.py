"""Driving the dashboard in headless Chromium (the browser tests of tests/api/dashboard): waiting for
a condition, signing in through the form, reading elements, and screenshots of a page or of one
element into docs/screenshots/ (and ``$KERNELLOOP_ARTIFACTS``)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.dashboard import Service
from tests.support.paths import REPO

WAIT_S = 15
SCREENSHOTS = REPO / "docs" / "screenshots"
#: The user prompt of the scripted sessions the pages show.
PROMPT = "Write a faster ModelNew for level2/conv_tanh_scale_bias_maxpool (cuda, H200)."


def wait(browser: Any, condition: Any, what: str) -> Any:
    # Stale elements: a condition read the page while a form's submission replaced it; try again.
    return WebDriverWait(browser, WAIT_S, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException,)).until(condition, message=what)


def sign_in(browser: Any, service: Service, path: str) -> None:
    browser.get(service.base_url + path)
    field = wait(browser, lambda b: b.find_element(By.ID, "api_key"), "the login form")
    assert "/login" in browser.current_url
    field.send_keys(service.key)
    browser.find_element(By.ID, "login-submit").click()
    arrived(browser, path, f"the redirect back to {path}")


def arrived(browser: Any, path: str, what: str) -> None:
    """Wait until the page at ``path`` is there: its URL, no login form, and its document parsed
    (the URL changes when a navigation commits, before its page is parsed: a loaded host showed
    the gap)."""
    wait(browser, lambda b: b.current_url.endswith(path) and not b.find_elements(By.ID, "api_key")
         and b.execute_script("return document.readyState") == "complete", what)


def count(browser: Any, selector: str) -> int:
    return len(browser.find_elements(By.CSS_SELECTOR, selector))


def text(browser: Any, element_id: str) -> str:
    return str(browser.find_element(By.ID, element_id).text)


def _save(png: bytes, name: str, artifacts_dir: Path) -> Path:
    for folder in (SCREENSHOTS, artifacts_dir):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(png)
    assert len(png) > 20_000, f"{name} looks blank"
    return SCREENSHOTS / name


def screenshot(browser: Any, name: str, artifacts_dir: Path, *, full_page: bool = True) -> Path:
    """The page (all of it, or the window's 1280×1000) into docs/screenshots/ and the artifacts."""
    if full_page:
        size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 6000), "scale": 1}
        shot = browser.execute_cdp_cmd("Page.captureScreenshot",
                                       {"format": "png", "captureBeyondViewport": True, "clip": clip})
        return _save(base64.b64decode(shot["data"]), name, artifacts_dir)
    return _save(browser.get_screenshot_as_png(), name, artifacts_dir)


def element_screenshot(browser: Any, element_id: str, name: str, artifacts_dir: Path) -> Path:
    """One element of the page, whole (beyond the window too), into docs/screenshots/."""
    box = browser.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return {x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width, height: r.height};",
        element_id)
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                               "clip": {**box, "scale": 1}})
    return _save(base64.b64decode(shot["data"]), name, artifacts_dir)
