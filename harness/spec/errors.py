"""Spec problems as one-line messages: file, field, what is wrong and what to write instead."""
from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pydantic is imported where a validation error is explained: SpecError itself stays light
    from pydantic import BaseModel, ValidationError


@dataclass(frozen=True)
class Problem:
    file: str
    field: str
    message: str

    def __str__(self) -> str:
        # One problem, one line: messages quoting YAML or exceptions may carry newlines of their own.
        message = " ".join(str(self.message).split())
        return f"{self.file}: {self.field}: {message}" if self.field else f"{self.file}: {message}"


def unique(problems: list[Problem]) -> list[Problem]:
    """The problems in order, each once (one mistake can surface once per case or per union member)."""
    seen, out = set(), []
    for p in problems:
        if str(p) not in seen:
            seen.add(str(p))
            out.append(p)
    return out


def exception_text(error: BaseException) -> str:
    """'Type: message' for a message line; the type alone when str() is empty (HookTimeout(),
    AssertionError()), so that a reason is never blank."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class SpecError(Exception):
    """One or more problems in the spec files; str() is one line per problem."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems = unique(problems)
        super().__init__("\n".join(str(p) for p in problems))


# pydantic names the member of a union that failed inside the error's location ('float',
# "literal['nan','inf']", 'list[...]'); a spec author knows the field, not the member.
_UNION_TAGS = ("float", "int", "str", "bool", "date", "none", "dict", "list", "literal", "function")


def _is_union_tag(part) -> bool:
    return isinstance(part, str) and (part in _UNION_TAGS or "[" in part)


def field_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if _is_union_tag(part):
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_at(root: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class found at `loc` below `root` (None when loc leaves the models)."""
    from pydantic import BaseModel

    node: typing.Any = root
    for part in loc:
        node = _unwrap(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            if part not in node.model_fields:
                return None
            node = node.model_fields[part].annotation
        else:
            args = typing.get_args(node)
            if not args:
                return None
            node = args[-1]  # list[X] -> X, dict[K, V] -> V
    node = _unwrap(node)
    return node if isinstance(node, type) and issubclass(node, BaseModel) else None


def _unwrap(annotation):
    """Strip Optional/Annotated so that `Forward | None` resolves to Forward."""
    from pydantic import BaseModel

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        return models[0] if models else (members[0] if len(members) == 1 else annotation)
    return annotation


def _shown_input(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def from_validation_error(file: Path | str, root: type[BaseModel], err: ValidationError) -> list[Problem]:
    by_field: dict[str, list[str]] = {}
    for problem in _problems(file, root, err):
        by_field.setdefault(problem.field, [])
        if problem.message not in by_field[problem.field]:
            by_field[problem.field].append(problem.message)
    # the members of a union fail together: one line saying what each would have taken
    return [Problem(str(file), name, "; or ".join(messages)) for name, messages in by_field.items()]


def _problems(file: Path | str, root: type[BaseModel], err: ValidationError) -> list[Problem]:
    problems = []
    for e in err.errors(include_url=False):
        loc = tuple(part for part in e["loc"] if not _is_union_tag(part))
        parent = _model_at(root, loc[:-1]) if loc else root
        name = loc[-1] if loc else ""
        if e["type"] == "missing":
            hint = _description(parent, name)
            msg = f"missing; add `{name}:`" + (f" ({hint})" if hint else "")
        elif e["type"] == "extra_forbidden":
            allowed = sorted(parent.model_fields) if parent else []
            close = difflib.get_close_matches(str(name), allowed, n=1)
            msg = "unknown field" + (f"; did you mean `{close[0]}`?" if close else "")
            msg += f" (allowed here: {', '.join(allowed)})" if allowed else ""
        else:
            hint = _description(parent, name)
            msg = f"got {_shown_input(e['input'])}: {e['msg']}" + (f"; write {hint}" if hint else "")
        problems.append(Problem(str(file), field_path(loc), msg))
    return problems


def _description(model: type[BaseModel] | None, name) -> str:
    if model is None or name not in model.model_fields:
        return ""
    return model.model_fields[name].description or ""
