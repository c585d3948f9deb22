"""Loading the spec set: YAML files under specs/<domain>/<Op>.yaml, plus specs/_defaults/."""
from __future__ import annotations

import fnmatch
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.core.compare import Tolerance
from harness.spec.dotted import PROJECT_PACKAGE, package_problem
from harness.core import spec_checks as checks
from harness.spec import unfinished
from harness.spec.errors import Problem, SpecError, from_validation_error
from harness.spec.model import Spec

REPO_SPECS = Path(__file__).resolve().parents[2] / "specs"


class UnknownOp(ValueError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys silently; a spec with one is almost always a mistake.
    Dates stay strings (pydantic parses them and names the field): PyYAML's own date constructor
    raises a bare ValueError on `2030-13-45`."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

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
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
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
    waivers: list = field(default_factory=list)  # harness.run.waivers.Waiver: harness.run.catalog.load adds them

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


# Limits on one YAML file, checked on the event stream before anything is built from it: a spec is
# a few KB, and a nesting or alias bomb must cost a line, not a RecursionError or a walk that
# expands nine levels of aliases into 387 million nodes.
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 40
MAX_NODES = 200_000  # after expanding aliases
NUL = bytes(1)


def read_yaml(path: Path) -> tuple[object, list[Problem]]:
    """The YAML document in path, or one Problem saying why it cannot be read (never raises)."""
    text, problem = _read_text(path)
    if problem:
        return None, [Problem(str(path), "", problem)]
    try:
        if problem := _structure_problem(text):
            return None, [Problem(str(path), problem[0], problem[1])]
        return yaml.load(text, Loader=_UniqueKeyLoader), []
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(e, "problem", None) or str(e)
        return None, [Problem(str(path), where, f"not valid YAML: {what}")]
    except (ValueError, TypeError, OverflowError, RecursionError) as e:  # a scalar PyYAML cannot construct
        return None, [Problem(str(path), "", f"not valid YAML: {type(e).__name__}: {e}")]


def _read_text(path: Path) -> tuple[str, str | None]:
    if path.is_symlink() and not path.exists():
        return "", f"a symlink to {os.readlink(path)}, which does not exist; fix or remove the link"
    if path.exists() and not path.is_file():
        return "", "not a regular file (a directory?); a spec or waivers file is a YAML file"
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return "", f"{path.stat().st_size:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit for one YAML file; split it"
        raw = path.read_bytes()
    except OSError as e:
        return "", f"cannot read: {e.strerror}"
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "", "encoded as UTF-16 (byte order mark); save it as UTF-8"
    if NUL in raw:
        return "", f"binary data (a NUL byte at offset {raw.index(NUL)}), not YAML text"
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        return "", f"not UTF-8 text: byte 0x{raw[e.start]:02x} at line {line} (offset {e.start}); save it as UTF-8"


def _structure_problem(text: str) -> tuple[str, str] | None:
    """(where, message) when the document nests deeper than MAX_DEPTH or its aliases expand past
    MAX_NODES; from the parser's events, which build nothing."""
    stack: list[list] = []  # per open collection: [anchor, nodes inside]
    sizes: dict[str, int] = {}  # anchor -> nodes it expands to
    total = 0
    for event in yaml.parse(text, Loader=_UniqueKeyLoader):
        mark = event.start_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            stack.append([event.anchor, 1])
            if len(stack) > MAX_DEPTH:
                return where, f"nested more than {MAX_DEPTH} levels deep; a spec needs a handful"
            continue
        if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, nodes = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, nodes = event.anchor, 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, nodes = None, sizes.get(event.anchor, 1)
        else:
            continue
        if anchor:
            sizes[anchor] = nodes
        if stack:
            stack[-1][1] += nodes
        else:
            total += nodes
        if (stack[0][1] if stack else total) > MAX_NODES:
            return where, (f"YAML aliases (*name) expand this document past {MAX_NODES:,} values; "
                           "write the values out or drop the aliases")
    return None


def load_spec(path: Path, packages=(PROJECT_PACKAGE,), max_case_bytes: int = checks.DEFAULT_MAX_CASE_BYTES
              ) -> tuple[Spec | None, list[Problem]]:
    where = shown(path)
    data, problems = read_yaml(path)
    if problems:
        return None, [Problem(where, p.field, p.message) for p in problems]
    if not isinstance(data, dict):
        return None, [Problem(where, "", "a spec is a YAML mapping (op:, inputs:, ...); this file is not one")]
    if todo := unfinished.missing_items(data):  # a spec from `opconform new-op` that is not filled in yet
        return None, [Problem(where, f, m) for f, m in todo]
    try:
        spec = Spec.model_validate(data)
    except ValidationError as e:
        return None, from_validation_error(where, Spec, e)
    problems = [Problem(where, f, m) for f, m in checks.check(spec, packages, max_case_bytes)]
    if path.stem != spec.op:
        problems.append(Problem(where, "op", f"the file is named {path.name} but the op is {spec.op}; "
                                              f"rename the file to {spec.op}.yaml"))
    if path.parent.name != spec.domain:
        problems.append(Problem(where, "domain", f"the file is in {path.parent.name}/ but the domain is "
                                                  f"{spec.domain!r}; move it to specs/{spec.domain}/"))
    if not problems:
        problems = [Problem(where, f, m) for f, m in unfinished.stub_problems(spec)]
    return (None if problems else spec), problems


def load_catalog(root: Path | None = None, max_case_bytes: int = checks.DEFAULT_MAX_CASE_BYTES) -> Catalog:
    """Every spec under root; raises SpecError listing every problem in every file.

    max_case_bytes: the budget for one case's tensors (checked for every case, every tier)."""
    root = Path(root or default_root())
    if not root.is_dir():
        raise SpecError([Problem(str(root), "", "no such spec directory; pass --specs DIR or set OPCONFORM_SPECS")])
    problems: list[Problem] = []
    defaults = _load_defaults(root, problems)
    packages = _load_hook_packages(root, problems)
    files = sorted(p for p in root.glob("*/*.yaml") if not p.parent.name.startswith("_"))
    specs, paths = [], {}
    digest = hashlib.sha256()
    for path in files:
        try:
            digest.update(path.read_bytes())
        except OSError:
            pass  # load_spec says why it cannot be read
        spec, found = load_spec(path, packages, max_case_bytes)
        problems += found
        if spec is None:
            continue
        if spec.id in paths:
            problems.append(Problem(shown(path), "op", f"{spec.id} is already defined in {paths[spec.id]}"))
        paths[spec.id] = path
        specs.append(spec)
    for spec in specs if defaults else []:  # no defaults at all: their file's own problem says why
        missing = [d for d in spec.type_constraints[spec.main_type].types
                   if d in ("float32", "float64", "float16", "bfloat16") and d not in defaults]
        if missing:
            problems.append(Problem(shown(paths[spec.id]), "type_constraints",
                                    f"no default tolerance for {', '.join(missing)} in {root}/_defaults/tolerances.yaml"))
    if problems:
        raise SpecError(problems)
    return Catalog(root, sorted(specs, key=lambda s: s.op), paths, defaults, digest.hexdigest())


class _Hooks(BaseModel):
    model_config = ConfigDict(extra="forbid")
    packages: list[str] = Field(description="top-level Python packages, besides reference, whose functions specs may name")


def _load_hook_packages(root: Path, problems: list[Problem]) -> tuple[str, ...]:
    """`reference`, plus the packages specs/_defaults/hooks.yaml declares (optional file)."""
    path = root / "_defaults" / "hooks.yaml"
    if not path.exists() and not path.is_symlink():
        return (PROJECT_PACKAGE,)
    data, found = read_yaml(path)
    try:
        parsed = _Hooks.model_validate(data) if not found else None
    except ValidationError as e:
        found = from_validation_error(shown(path), _Hooks, e)
    if found:
        problems += [Problem(shown(path), p.field, p.message) for p in found]
        return (PROJECT_PACKAGE,)
    for index, name in enumerate(parsed.packages):
        if problem := package_problem(name):
            problems.append(Problem(shown(path), f"packages[{index}]", f"{problem}; declare the package that holds "
                                                                       "your reference functions"))
    return (PROJECT_PACKAGE, *[n for n in parsed.packages if not package_problem(n)])


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
