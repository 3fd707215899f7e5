"""Turn a pydantic `ValidationError` into the one line a user needs to fix the file."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ValidationError


def describe_validation_error(exc: ValidationError, origin: str, root: type[BaseModel]) -> str:
    """``FILE: KEY: what is wrong; what is allowed`` for the first error (+ a count of others)."""
    errors = exc.errors()
    first = errors[0]
    loc = tuple(first["loc"])
    key = _dotted(loc) or "(top level)"
    kind = first["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(root, loc[:-1])
        parent = _dotted(loc[:-1]) or "the top level"
        text = f"unknown key {key!r}; allowed under {parent}: {', '.join(allowed)}"
    else:
        got = first.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        text = f"{key}: {first['msg']}{shown}"
    more = f" [and {len(errors) - 1} more problem(s)]" if len(errors) > 1 else ""
    where = (
        f"{origin} or its ROWBUS_* environment overrides"
        if origin != "defaults"
        else ("ROWBUS_* environment overrides")
    )
    return f"{where}: {text}{more}"


def _dotted(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _allowed_keys(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    model: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = _model_of(field.annotation)
        if model is None:
            return []
    return sorted(getattr(model, "model_fields", {}))


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None
