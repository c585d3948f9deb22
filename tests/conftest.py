import shutil
from pathlib import Path

import pytest

from harness.backends.ort import OrtBackend
from harness.core.cases import expand
from harness.core.spec_loader import load_catalog
from harness.run.catalog import RunCatalog
from harness.run.engine import judge, prepare
from harness.run.self_consistency import follow_ups

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs"


def alive(pid: int) -> bool:
    """Running or sleeping; a zombie (killed, not yet reaped by a container's init) is gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.fixture(scope="session")
def catalog():
    """The specs as a run reads them, with no waivers: a fixture never reads the repository's _waivers/."""
    return RunCatalog.of(load_catalog(SPECS))


@pytest.fixture(scope="module")
def ort():
    """The ort backend (one worker per test module), skipped where onnxruntime-training is unavailable."""
    backend = OrtBackend()
    if reason := backend.availability():
        pytest.skip(reason)
    yield backend
    backend.close()


def cases_of(catalog, op, tier="ci"):
    return expand(catalog.by_op(op), tier)


def run_on(backend, catalog, case):
    """A case judged on one backend as a run judges it: the first result, then its self-consistency follow-ups."""
    prepared = prepare(case)
    tolerance = catalog.tolerance(case.spec, case.dtype)
    first = judge(prepared, backend, tolerance)
    return [first, *follow_ups(prepared, backend, first, tolerance, catalog)]


def copy_specs(target: Path, source: Path = SPECS) -> Path:
    """A copy of a spec tree without its waiver files (_waivers/*.yaml): they name the repository's ops and backends,
    so a test that read them would break when the repository gains its first waiver. A test writes its own."""
    def waivers(directory, names):
        return [n for n in names if Path(directory).name == "_waivers" and n.endswith((".yaml", ".yml"))]

    shutil.copytree(source, target, ignore=waivers)
    return target


@pytest.fixture
def spec_copy(tmp_path) -> Path:
    """A private copy of specs/ that a test may break (without the repository's waivers: copy_specs)."""
    return copy_specs(tmp_path / "specs")


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))
