"""The catalog the commands use: the specs (harness.core.spec_loader), then the waivers checked against
them and the backend registry. The loader reads specs only; this is where the CLI and the pytest
suite compose the layers, so the spec layer imports nothing from waivers, backends or scaffolding.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from harness import backends as registry
from harness.run import waivers as waiver_rules
from harness.core.spec_checks import BACKEND_NAMES
from harness.spec.errors import SpecError
from harness.core.spec_loader import Catalog, load_catalog


def load(root: Path | None = None, **options) -> Catalog:
    """load_catalog(root, **options) with specs/_waivers/<backend>.yaml loaded; SpecError lists any problem."""
    catalog = load_catalog(root, **options)
    problems: list = []
    waivers = waiver_rules.load(catalog.root, catalog.specs, sorted({*registry.FACTORIES, *BACKEND_NAMES}), problems)
    if problems:
        raise SpecError(problems)
    return dataclasses.replace(catalog, waivers=waivers)
