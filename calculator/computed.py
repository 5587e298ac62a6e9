"""Result models built from values the engine computed itself, without validating them a second time.

An estimate builds four result models (the resolved settings, a budget per stage, the capacity figures and the
estimate) from values its own typed functions computed out of a validated Scenario and ModelSpec. Validating them
again costs more than a third of a slider move's estimate (valgrind: ~124 k of ~359 k instructions for
Llama-3.1-8B), and the recommender and the sweeps run hundreds of estimates per page. pydantic's own
``model_construct`` is slower than validating (it walks every field in Python), so the fields go straight into the
instance's ``__dict__`` in the fields' order, with the defaults filled in, which is what ``model_construct`` ends with.
The fields come as one dict, not as keywords: CPython 3.11 compiles a call with 16 or more keyword arguments into
building a dict, unpacking it onto the stack and packing it again into ``**values`` (~1 us for 24 fields, against
~0.2 us for 15), and a dict display given as it is becomes the ``__dict__`` with no copy.

The test suite sets ``CALCULATOR_VALIDATE_COMPUTED=1`` (tests/conftest.py), so every model built here is validated
there, in full, as ``Model(**values)`` would: a wrong type the engine produced fails the tests instead of passing
silently.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

Model = TypeVar("Model", bound=BaseModel)

VALIDATE_ENV = "CALCULATOR_VALIDATE_COMPUTED"
_VALIDATE = os.environ.get(VALIDATE_ENV) == "1"


@cache
def _template(cls: type[BaseModel]) -> tuple[dict[str, Any], tuple[str, ...], set[str]]:
    """Every field in declaration order (what validation's ``__dict__`` keeps, and so model_dump_json's order), with
    its default, or None where the caller must give it; their order; and the set of their names."""
    fields = cls.model_fields
    if factory := next((name for name, field in fields.items() if field.default_factory is not None), None):
        raise TypeError(f"{cls.__name__}.{factory} has a default factory; computed() fills plain defaults only")
    return ({name: None if field.default is PydanticUndefined else field.default for name, field in fields.items()},
            tuple(fields), set(fields))


_new = object.__new__
# NOTE: BaseModel's slots' own setters: object.__setattr__(model, "__dict__", ...) looks the slot up on every call.
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def computed(cls: type[Model], values: dict[str, Any]) -> Model:
    """``cls(**values)`` for values computed by the engine: the same instance, not validated again (except under
    the test suite, see the module's docstring). Every required field must be given.

    ``values`` becomes the instance's ``__dict__``: pass a fresh dict display, with every field in declaration
    order where all are given (the suite checks that order).
    """
    template, order, names = _template(cls)
    if _VALIDATE:
        if len(values) == len(order) and tuple(values) != order:
            raise ValueError(f"computed({cls.__name__}, ...) got every field, but not in declaration order {order}")
        return cls(**values)
    model = _new(cls)
    if len(values) == len(order):
        _set_dict(model, values)
        _set_fields_set(model, names)  # NOTE: one shared set per class: a frozen model never adds to it
    else:
        _set_dict(model, {**template, **values})
        _set_fields_set(model, set(values))
    _set_extra(model, None)
    _set_private(model, None)
    return model
