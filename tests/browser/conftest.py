"""Playwright drives Debian's chromium (/usr/bin/chromium, or $OPCONFORM_CHROMIUM; `.ci/run` installs
it with apt-get). Never `playwright install`: no browser is downloaded."""
import os
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("OPCONFORM_CHROMIUM", "/usr/bin/chromium"))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is absent: install Debian's chromium (`apt-get install -y chromium`) to run the report's browser test"
        if os.environ.get("OPCONFORM_REQUIRE_BROWSER"):  # set by .ci/run, where a skip would hide a broken install
            pytest.fail(reason)
        pytest.skip(reason)
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM), "args": FLAGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1400, "height": 1000}}
