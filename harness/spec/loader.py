"""Loading the spec set: YAML files under specs/<domain>/<Op>.yaml, plus specs/_defaults/."""
from __future__ import annotations

import fnmatch
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.compare import Tolerance
from harness import scaffold
from harness.spec import checks
from harness.spec.errors import Problem, SpecError, from_validation_error
from harness.spec.model import Spec

REPO_SPECS = Path(__file__).resolve().parents[2] / "specs"


class UnknownOp(ValueError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys silently; a spec with one is almost always a mistake."""

    def construct_mapping(self, node, deep=False):
        keys = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in keys:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key '{key}' appears twice in one mapping", key_node.start_mark)
            keys.add(key)
        return super().construct_mapping(node, deep)


class _DefaultTolerance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)


class _Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tolerances: dict[str, _DefaultTolerance]


@dataclass
class Catalog:
    root: Path
    specs: list[Spec]
    files: dict[str, Path] = field(default_factory=dict)  # spec id -> file
    default_tolerances: dict[str, Tolerance] = field(default_factory=dict)
    digest: str = ""  # sha256 over every spec file: names the spec set in results
    waivers: list = field(default_factory=list)  # harness.waivers.Waiver from specs/_waivers/<backend>.yaml

    def select(self, patterns: list[str] | None) -> list[Spec]:
        """Specs whose op name matches any pattern (exact names or globs), in catalog order."""
        if not patterns:
            return list(self.specs)
        names = [s.op for s in self.specs]
        for pattern in patterns:
            if not fnmatch.filter(names, pattern):
                raise UnknownOp(checks.unknown_name("op", pattern, names) if not set("*?[") & set(pattern)
                                else f"'{pattern}' matches no op (known: {', '.join(names)})")
        return [s for s in self.specs if any(fnmatch.fnmatchcase(s.op, p) for p in patterns)]

    def by_op(self, op: str, domain: str | None = None) -> Spec:
        for s in self.specs:
            if s.op == op and (domain is None or s.domain == domain):
                return s
        raise UnknownOp(checks.unknown_name("op", op, [s.op for s in self.specs]))

    def tolerance(self, spec: Spec, dtype: str) -> Tolerance:
        if dtype in spec.tolerances:
            t = spec.tolerances[dtype]
            return Tolerance(t.atol, t.rtol, f"spec({dtype}): {t.reason}")
        return self.default_tolerances[dtype]

    def path(self, spec: Spec) -> str:
        return shown(self.files[spec.id])


def shown(path: Path) -> str:
    """A path as a user would type it: relative to the working directory when inside it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def default_root() -> Path:
    """$OPCONFORM_SPECS, else ./specs, else the specs/ beside this package (editable installs)."""
    if env := os.environ.get("OPCONFORM_SPECS"):
        return Path(env)
    return Path("specs") if Path("specs").is_dir() else REPO_SPECS


def read_yaml(path: Path) -> tuple[object, list[Problem]]:
    try:
        return yaml.load(path.read_text(), Loader=_UniqueKeyLoader), []
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(e, "problem", None) or str(e)
        return None, [Problem(str(path), where, f"not valid YAML: {what}")]
    except OSError as e:
        return None, [Problem(str(path), "", f"cannot read: {e.strerror}")]


def load_spec(path: Path) -> tuple[Spec | None, list[Problem]]:
    where = shown(path)
    data, problems = read_yaml(path)
    if problems:
        return None, [Problem(where, p.field, p.message) for p in problems]
    if not isinstance(data, dict):
        return None, [Problem(where, "", "a spec is a YAML mapping (op:, inputs:, ...); this file is not one")]
    if todo := scaffold.missing_items(data):  # a spec from `opconform new-op` that is not filled in yet
        return None, [Problem(where, f, m) for f, m in todo]
    try:
        spec = Spec.model_validate(data)
    except ValidationError as e:
        return None, from_validation_error(where, Spec, e)
    problems = [Problem(where, f, m) for f, m in checks.check(spec)]
    if path.stem != spec.op:
        problems.append(Problem(where, "op", f"the file is named {path.name} but the op is {spec.op}; "
                                              f"rename the file to {spec.op}.yaml"))
    if path.parent.name != spec.domain:
        problems.append(Problem(where, "domain", f"the file is in {path.parent.name}/ but the domain is "
                                                  f"{spec.domain!r}; move it to specs/{spec.domain}/"))
    if not problems:
        problems = [Problem(where, f, m) for f, m in scaffold.stub_problems(spec)]
    return (None if problems else spec), problems


def load_catalog(root: Path | None = None) -> Catalog:
    """Every spec under root; raises SpecError listing every problem in every file."""
    root = Path(root or default_root())
    if not root.is_dir():
        raise SpecError([Problem(str(root), "", "no such spec directory; pass --specs DIR or set OPCONFORM_SPECS")])
    problems: list[Problem] = []
    defaults = _load_defaults(root, problems)
    files = sorted(p for p in root.glob("*/*.yaml") if not p.parent.name.startswith("_"))
    specs, paths = [], {}
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
        spec, found = load_spec(path)
        problems += found
        if spec is None:
            continue
        if spec.id in paths:
            problems.append(Problem(shown(path), "op", f"{spec.id} is already defined in {paths[spec.id]}"))
        paths[spec.id] = path
        specs.append(spec)
    for spec in specs:
        missing = [d for d in spec.type_constraints[spec.inputs[0].type].types
                   if d in ("float32", "float64", "float16", "bfloat16") and d not in defaults]
        if missing:
            problems.append(Problem(shown(paths[spec.id]), "type_constraints",
                                    f"no default tolerance for {', '.join(missing)} in {root}/_defaults/tolerances.yaml"))
    waivers = [] if problems else _load_waivers(root, specs, problems)
    if problems:
        raise SpecError(problems)
    return Catalog(root, sorted(specs, key=lambda s: s.op), paths, defaults, digest.hexdigest(), waivers)


def _load_waivers(root: Path, specs: list[Spec], problems: list[Problem]) -> list:
    from harness import backends, waivers

    return waivers.load(root, specs, sorted({*backends.FACTORIES, *checks.BACKEND_NAMES}), problems)


def _load_defaults(root: Path, problems: list[Problem]) -> dict[str, Tolerance]:
    path = root / "_defaults" / "tolerances.yaml"
    data, found = read_yaml(path)
    problems += found
    if found:
        return {}
    try:
        parsed = _Defaults.model_validate(data)
    except ValidationError as e:
        problems += from_validation_error(shown(path), _Defaults, e)
        return {}
    return {d: Tolerance(t.atol, t.rtol, f"default({d})") for d, t in parsed.tolerances.items()}
