"""The catalog the commands use: the specs (harness.core.spec_loader), then the waivers and the
backend names of the known divergences checked against them and the backend registry. The loader reads
specs only; this is where the CLI and the pytest suite compose the layers, so the spec layer imports
nothing from waivers, backends or scaffolding. RunCatalog is the core catalog plus the run's waivers:
core knows nothing of waivers.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from harness import backends as registry
from harness.core.spec_loader import Catalog, load_catalog, shown
from harness.run import waivers as waiver_rules
from harness.run.waivers import Waiver
from harness.spec.errors import Problem, SpecError
from harness.spec.names import unknown_name


@dataclass
class RunCatalog(Catalog):
    """The specs (every field of harness.core.spec_loader.Catalog) and the waivers that apply to the run."""
    waivers: list[Waiver] = field(default_factory=list)

    @classmethod
    def of(cls, catalog: Catalog, waivers: list[Waiver] | None = None) -> RunCatalog:
        """The core catalog's specs with these waivers (none: a run that waives nothing)."""
        fields = {f.name: getattr(catalog, f.name) for f in dataclasses.fields(Catalog)}
        return cls(**fields, waivers=list(waivers or ()))


def is_backend(name: str) -> bool:
    """A name a known divergence or a waiver may be written for: one the registry can create here."""
    try:
        registry.check(name)
        return True
    except registry.UnknownBackend:
        return False


def load(root: Path | None = None, waiver_files=(), **options) -> RunCatalog:
    """load_catalog(root, **options) (sources=, ops=, max_case_bytes=, log=) with the waivers of every
    spec directory (<dir>/_waivers/*.yaml) and `waiver_files` (a team's own, e.g. `--waivers FILE`)
    loaded; SpecError lists any problem. With ops selected, a waiver of an op that is not loaded is
    checked as far as the file names allow (its op exists) and covers nothing in the run."""
    catalog = load_catalog(root, **options)
    problems: list = []
    known = registry.known()
    for spec in catalog.specs:
        for index, d in enumerate(spec.known_divergences):
            if not is_backend(d.backend):
                problems.append(Problem(shown(catalog.files[spec.id]), f"known_divergences[{index}].backend",
                                        unknown_name("backend", d.backend, known)))
    roots = [root for root, _ in catalog.loader.index.layers] if catalog.loader else [catalog.root]
    waivers = waiver_rules.load(roots, catalog.specs, known, problems, extra_files=waiver_files,
                                is_known=is_backend, all_ops=catalog.all_ops)
    if problems:
        raise SpecError(problems)
    return RunCatalog.of(catalog, waivers)
