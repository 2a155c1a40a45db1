"""Models built from values already known to be valid, without validating them again.

Measured figures, the fragments a split or a trim derives from validated ones, the parts of a
report: their values are right by construction, and pydantic's validation (or its
``model_construct``, which is slower still) would cost more than the work that produced them.
:func:`built` sets what ``model_construct`` sets, every field given or defaulted, and a test
holds each use to the model that validation builds from the same values.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["built"]

M = TypeVar("M", bound=BaseModel)
_set = object.__setattr__
_new = object.__new__
_DEFAULTS: dict[type, dict[str, Any]] = {}


def _defaults(cls: type[BaseModel]) -> dict[str, Any]:
    found = _DEFAULTS.get(cls)
    if found is None:
        if cls.__pydantic_post_init__ is not None or cls.__private_attributes__:
            raise TypeError(f"{cls.__name__} needs pydantic's own construction")
        # Every field, in the model's order (a dict merge keeps it); required ones must be given.
        found = {name: None if field.is_required() else field.get_default(
                     call_default_factory=False) for name, field in cls.model_fields.items()}
        _DEFAULTS[cls] = found
    return found


def built(
    cls: type[M], values: dict[str, Any], fields_set: set[str] | frozenset[str] | None = None
) -> M:
    """An instance of ``cls`` holding ``values`` (by field name; fields left out take their
    defaults, which must not be mutable). ``fields_set`` defaults to the names given."""
    defaults = _DEFAULTS.get(cls) or _defaults(cls)
    model = _new(cls)  # what cls.__new__ is, without the lookup through pydantic's metaclass
    _set(model, "__dict__", {**defaults, **values})
    _set(model, "__pydantic_fields_set__", set(values if fields_set is None else fields_set))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model
