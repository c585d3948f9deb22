import shutil
from pathlib import Path

import pytest

from harness.core.spec_loader import load_catalog

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs"


@pytest.fixture(scope="session")
def catalog():
    return load_catalog(SPECS)


@pytest.fixture
def spec_copy(tmp_path) -> Path:
    """A private copy of specs/ that a test may break."""
    target = tmp_path / "specs"
    shutil.copytree(SPECS, target)
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))
