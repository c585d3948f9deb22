"""The catalog the commands use: the specs (harness.core.spec_loader), then the waivers and the
backend names of the known divergences checked against them and the backend registry. The loader reads
specs only; this is where the CLI and the pytest suite compose the layers, so the spec layer imports
nothing from waivers, backends or scaffolding.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from harness import backends as registry
from harness.core.spec_checks import unknown_name
from harness.core.spec_loader import Catalog, load_catalog, shown
from harness.run import waivers as waiver_rules
from harness.spec.errors import Problem, SpecError


def is_backend(name: str) -> bool:
    """A name a known divergence or a waiver may be written for: one the registry can create here."""
    try:
        registry.check(name)
        return True
    except registry.UnknownBackend:
        return False


def load(root: Path | None = None, waiver_files=(), **options) -> Catalog:
    """load_catalog(root, **options) with specs/_waivers/*.yaml and `waiver_files` (a team's own,
    e.g. `--waivers FILE`) loaded; SpecError lists any problem."""
    catalog = load_catalog(root, **options)
    problems: list = []
    known = registry.known()
    for spec in catalog.specs:
        for index, d in enumerate(spec.known_divergences):
            if not is_backend(d.backend):
                problems.append(Problem(shown(catalog.files[spec.id]), f"known_divergences[{index}].backend",
                                        unknown_name("backend", d.backend, known)))
    waivers = waiver_rules.load(catalog.root, catalog.specs, known, problems, extra_files=waiver_files,
                                is_known=is_backend)
    if problems:
        raise SpecError(problems)
    return dataclasses.replace(catalog, waivers=waivers)
