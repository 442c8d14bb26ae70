"""Fixtures for the dashboard tests: a live API (uvicorn) and a headless Chromium (Selenium), both
of `tests.support.dashboard`."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.dashboard import CHROME_ARGS, CHROMEDRIVER, Service, chromium, live_service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with live_service(tmp_path) as running:
        yield running


@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: ``$KERNELLOOP_ARTIFACTS`` (CI uploads it), else a temporary folder."""
    kept = os.environ.get("KERNELLOOP_ARTIFACTS")
    path = Path(kept) if kept else tmp_path_factory.mktemp("artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def browser() -> Iterator[object]:
    if not CHROMEDRIVER.exists():
        pytest.fail(f"{CHROMEDRIVER} is missing: run scripts/ensure-browser (apt-get install chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    profile = tempfile.mkdtemp(prefix="kl-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium()
    for arg in (*CHROME_ARGS, f"--user-data-dir={profile}"):
        options.add_argument(arg)
    # The console (for Content-Security-Policy refusals): `browser.get_log("browser")`.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=DriverService(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
