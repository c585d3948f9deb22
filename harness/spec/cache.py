"""The cache of parsed and checked specs, under $XDG_CACHE_HOME/opconform (default ~/.cache/opconform).

Loading a spec means parsing its YAML, validating it against the model and building every case as far
as its shapes (harness.core.spec_checks): tenths of a second per spec, paid again by every command.
An entry keeps the outcome (the Spec, or its problems) under a key over everything that outcome
depends on: the spec file's bytes and name, its overlays' bytes and names, the defaults and hook
packages of its directory, the memory budget per case, the harness's own loading code (its source
bytes), the versions of pydantic and PyYAML and this format's number. The hook modules a spec names
are known only once it is parsed: the entry records each module's source hash and a hit requires them
unchanged. (A module a hook module imports is not followed: `OPCONFORM_NO_CACHE=1` when editing one.)

An entry that cannot be read, unpickled or is not what this code wrote is a miss, and is rewritten;
a cache directory that cannot be written is no cache. Entries are written whole (a temporary file,
then rename), so concurrent writers (pytest-xdist workers) never leave half an entry.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import pickle
import sys
import tempfile
from functools import cache
from pathlib import Path

FORMAT = 1  # bump when an entry's layout or meaning changes
DISABLE = "OPCONFORM_NO_CACHE"
MAX_ENTRIES = 4000  # past this, the oldest entries go when one is written
_HARNESS = Path(__file__).resolve().parents[1]
# The code whose behaviour an entry stores: parsing, the models, the checks and what they call.
_CODE = ("spec", "core")


def enabled() -> bool:
    return os.environ.get(DISABLE, "").strip() in ("", "0")


def directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base) if base and Path(base).is_absolute() else Path.home() / ".cache") / "opconform" / f"specs-{FORMAT}"


@cache
def harness_version() -> str:
    """A hash of the harness's loading and checking code, so an edit or a new release is a new key."""
    h = hashlib.sha256(f"format {FORMAT} python {sys.version_info[:2]}".encode())
    for part in _CODE:
        for path in sorted((_HARNESS / part).glob("*.py")):
            h.update(path.name.encode())
            try:
                h.update(path.read_bytes())
            except OSError:
                h.update(b"?")
    return h.hexdigest()


def key(*parts) -> str:
    """The key of an entry over `parts` (bytes, str or int), the harness version and library versions."""
    import pydantic
    import yaml

    h = hashlib.sha256(harness_version().encode())
    h.update(f"pydantic {pydantic.VERSION} pyyaml {yaml.__version__}".encode())
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def module_file(name: str) -> str | None:
    """The source file `import name` would load, found without running any package's __init__."""
    try:
        top, *rest = name.split(".")
        spec = importlib.util.find_spec(top)
        for i, part in enumerate(rest):
            if spec is None or not spec.submodule_search_locations:
                return None
            spec = importlib.machinery.PathFinder.find_spec(".".join([top, *rest[:i + 1]]),
                                                            list(spec.submodule_search_locations))
        return spec.origin if spec is not None and spec.has_location else None
    except (ImportError, ValueError, AttributeError, OSError):
        return None


def source_hash(module: str) -> str | None:
    path = module_file(module)
    if path is None:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def hook_hashes(modules) -> dict[str, str | None]:
    return {m: source_hash(m) for m in sorted(set(modules))}


def get(entry_key: str):
    """The stored value, or None: a missing, unreadable or foreign entry, or one whose hook modules
    changed since it was written."""
    if not enabled():
        return None
    path = directory() / f"{entry_key}.pickle"
    try:
        with path.open("rb") as f:
            stored = pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - a truncated or corrupted entry (any unpickling error) is a miss
        return None
    if not (isinstance(stored, dict) and stored.get("format") == FORMAT and stored.get("key") == entry_key
            and isinstance(stored.get("hooks"), dict)):
        return None
    if hook_hashes(stored["hooks"]) != stored["hooks"]:
        return None
    return stored.get("value")


def put(entry_key: str, value, hook_modules=()) -> None:
    """Store value under entry_key with the source hashes of hook_modules; never raises."""
    if not enabled():
        return
    folder = directory()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        data = pickle.dumps({"format": FORMAT, "key": entry_key, "hooks": hook_hashes(hook_modules), "value": value},
                            protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".pickle")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, folder / f"{entry_key}.pickle")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _prune(folder)
    except Exception:  # noqa: BLE001 - no cache (read-only home, a full disk, an unpicklable value) is only slower
        return


def _prune(folder: Path) -> None:
    entries = list(folder.glob("*.pickle"))
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda p: p.stat().st_mtime)
    for path in entries[: len(entries) - MAX_ENTRIES // 2]:
        path.unlink(missing_ok=True)
