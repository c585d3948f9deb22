"""Where the specs come from, and what is there, found from file names alone (nothing parsed).

The spec set is a stack of directories:
- the built-in specs, shipped in the package (builtin_root): the repository's specs/ in a source
  checkout or an editable install, the copy CMakeLists.txt installs as harness/specs in a wheel;
- then a team's directories, in order: `--specs DIR` (repeatable) after $OPCONFORM_SPECS
  (os.pathsep-separated). `--no-builtin-specs` leaves the built-in specs and their waivers out.

A directory holds `<domain>/<Op>.yaml` (a whole spec), `<domain>/<Op>.overlay.yaml` (case groups added
to an op's spec in another directory), `_defaults/` (tolerances.yaml and hooks.yaml overriding the
built-in ones for that directory's specs) and `_waivers/`. An op name is defined once across the
stack: a second spec of the same name, or an overlay of an op nobody defines, is an error found here,
before any spec is parsed. SpecIndex also answers `--ops` patterns and computes the spec-set digest
(over every spec and overlay file, selected or not) without parsing anything.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from harness.spec.names import unknown_name

OVERLAY_SUFFIX = ".overlay.yaml"
ENV = "OPCONFORM_SPECS"
_HARNESS = Path(__file__).resolve().parents[1]  # the harness package


def builtin_root() -> Path:
    """The built-in specs: the checkout's specs/ when this harness runs from its source tree (source
    checkout, editable install: the files contributors edit), else the copy installed in the package."""
    checkout = _HARNESS.parent
    try:
        project = (checkout / "pyproject.toml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        project = ""
    if 'name = "opconform"' in project and (checkout / "specs").is_dir():
        return checkout / "specs"
    return _HARNESS / "specs"


def checkout_root() -> Path | None:
    """The source checkout this harness runs from (a clone, an editable install), None for an installed wheel."""
    root = builtin_root()
    return root.parent if root != _HARNESS / "specs" else None


class UnknownOp(ValueError):
    pass


def same_dir(a: Path, b: Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


@dataclass(frozen=True)
class SpecSources:
    """The directories of a spec set, in order. `base` replaces the built-in specs (load_catalog(root),
    a complete spec tree such as a test's copy); otherwise the built-in specs come first unless
    builtin is False. `dirs` are team directories stacked on top."""
    dirs: tuple[Path, ...] = ()
    builtin: bool = True
    base: Path | None = None

    @classmethod
    def resolve(cls, dirs=(), no_builtin: bool = False, environ=None) -> SpecSources:
        """$OPCONFORM_SPECS, then `dirs` (--specs), each once; the built-in directory named again is the
        built-in specs themselves, not a second copy of them."""
        environ = os.environ if environ is None else environ
        from_env = [Path(p) for p in environ.get(ENV, "").split(os.pathsep) if p.strip()]
        out: list[Path] = []
        builtin = builtin_root()
        for d in [*from_env, *(Path(d) for d in dirs or ())]:
            if any(same_dir(d, seen) for seen in out):
                continue
            if not no_builtin and same_dir(d, builtin):
                continue
            out.append(d)
        return cls(tuple(out), builtin=not no_builtin)

    def layers(self) -> list[tuple[Path, str]]:
        """(directory, kind) bottom to top; kind is builtin, base or team."""
        first = [(self.base, "base")] if self.base is not None else [(builtin_root(), "builtin")] if self.builtin else []
        return first + [(d, "team") for d in self.dirs]

    @property
    def root(self) -> Path | None:
        """The bottom directory: what a catalog's `root` names (generated tests sit beside it)."""
        layers = self.layers()
        return layers[0][0] if layers else None

    def describe(self) -> dict:
        """What a run records to rerun with the same specs (harness.report.repro)."""
        return {"builtin": self.builtin and self.base is None,
                "dirs": [str(Path(d).resolve()) for d in ([self.base] if self.base is not None else []) + list(self.dirs)]}

    def flags(self) -> list[str]:
        """The command-line flags that give these sources (beside $OPCONFORM_SPECS being unset)."""
        record = self.describe()
        out = [flag for d in record["dirs"] for flag in ("--specs", d)]
        return out + ([] if record["builtin"] else ["--no-builtin-specs"])


@dataclass(frozen=True)
class SpecFile:
    op: str  # from the file name: the loader checks the spec's `op:` matches it
    domain: str  # the parent directory's name
    path: Path
    layer: int  # index into SpecIndex.layers

    @property
    def overlay(self) -> bool:
        return self.path.name.endswith(OVERLAY_SUFFIX)


def shown(path: Path) -> str:
    """A path as a user would type it: relative to the working directory when inside it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


@dataclass
class SpecIndex:
    """The files of a spec set by op name, from a directory listing. problems: (file, field, message)
    for the mistakes visible in names alone (a spec defined twice across directories, an overlay of
    an unknown op, a directory that does not exist); they concern the whole set."""
    sources: SpecSources
    layers: list[tuple[Path, str]]
    specs: dict[str, list[SpecFile]] = field(default_factory=dict)  # op -> its spec file(s), bottom layer first
    overlays: dict[str, list[SpecFile]] = field(default_factory=dict)  # op -> overlay files, bottom layer first
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    _digest: str | None = None

    @classmethod
    def scan(cls, sources: SpecSources) -> SpecIndex:
        index = cls(sources, sources.layers())
        if not index.layers:
            index.problems.append(("--no-builtin-specs", "", "no spec directory left: pass --specs DIR or set "
                                   f"{ENV} (the built-in specs are left out)"))
        overlays: list[SpecFile] = []
        for number, (root, kind) in enumerate(index.layers):
            if not root.is_dir():
                hint = ("the installed package lacks its built-in specs; reinstall opconform" if kind == "builtin"
                        else f"pass --specs DIR or set {ENV}")
                index.problems.append((str(root), "", f"no such spec directory; {hint}"))
                continue
            for path in sorted(p for p in root.glob("*/*.yaml") if not p.parent.name.startswith("_")):
                if path.name.endswith(OVERLAY_SUFFIX):
                    overlays.append(SpecFile(path.name[:-len(OVERLAY_SUFFIX)], path.parent.name, path, number))
                    continue
                entry = SpecFile(path.stem, path.parent.name, path, number)
                others = [e for e in index.specs.get(entry.op, []) if e.layer != number]
                if others:
                    other = others[0]
                    what = "a built-in spec" if index.layers[other.layer][1] in ("builtin", "base") else "already defined"
                    index.problems.append((shown(path), "op", f"{entry.op} is {what} in {shown(other.path)}; a team "
                                           f"directory adds new ops, or case groups to an existing op in "
                                           f"{entry.domain}/{entry.op}{OVERLAY_SUFFIX} (extends: {entry.op})"))
                    continue
                index.specs.setdefault(entry.op, []).append(entry)
        for entry in overlays:
            if entry.op not in index.specs:
                index.problems.append((shown(entry.path), "extends", unknown_op_text(entry.op, sorted(index.specs))
                                       + f"; an overlay adds groups to an op's spec and is named <Op>{OVERLAY_SUFFIX}"))
                continue
            index.overlays.setdefault(entry.op, []).append(entry)
        return index

    @property
    def names(self) -> list[str]:
        return sorted(self.specs)

    def files(self) -> list[SpecFile]:
        return sorted([e for entries in [*self.specs.values(), *self.overlays.values()] for e in entries],
                      key=lambda e: (e.layer, str(e.path)))

    @property
    def digest(self) -> str:
        """sha256 over every spec and overlay file in the set, layer by layer: names the spec set in
        results whichever ops a run selects (the built-in set alone hashes as it always did)."""
        if self._digest is None:
            h = hashlib.sha256()
            for entry in self.files():
                try:
                    h.update(entry.path.read_bytes())
                except OSError:
                    pass  # the loader says why it cannot be read
            self._digest = h.hexdigest()
        return self._digest

    def select(self, patterns) -> list[str]:
        """The op names matching any pattern (exact names or globs); UnknownOp for a pattern matching
        none, with the nearest name."""
        names = self.names
        if not patterns:
            return names
        for pattern in patterns:
            if not fnmatch.filter(names, pattern):
                raise UnknownOp(unknown_op_text(pattern, names) if not set("*?[") & set(pattern)
                                else f"'{pattern}' matches no op (known: {', '.join(names)})")
        return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def unknown_op_text(name: str, known) -> str:
    return unknown_name("op", name, known)
