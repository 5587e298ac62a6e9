"""Result models built from values the engine computed itself, without validating them a second time.

An estimate builds four result models (the resolved settings, a budget per stage, the capacity figures and the
estimate) from values its own typed functions computed out of a validated Scenario and ModelSpec. Validating them
again costs more than a third of a slider move's estimate (valgrind: ~124 k of ~359 k instructions for
Llama-3.1-8B), and the recommender and the sweeps run hundreds of estimates per page. pydantic's own
``model_construct`` is slower than validating (it walks every field in Python), so the fields go straight into the
instance's ``__dict__`` in the fields' order, with the defaults filled in, which is what ``model_construct`` ends with.

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
def _template(cls: type[BaseModel]) -> tuple[dict[str, Any], set[str], tuple[str, ...]]:
    """Every field in declaration order (what validation's ``__dict__`` keeps, and so model_dump_json's order), with
    its default, or None where the caller must give it; the set of every field's name; and their order."""
    fields = cls.model_fields
    if factory := next((name for name, field in fields.items() if field.default_factory is not None), None):
        raise TypeError(f"{cls.__name__}.{factory} has a default factory; computed() fills plain defaults only")
    return ({name: None if field.default is PydanticUndefined else field.default for name, field in fields.items()},
            set(fields), tuple(fields))


def computed(cls: type[Model], **values: Any) -> Model:
    """``cls(**values)`` for values computed by the engine: the same instance, not validated again (except under
    the test suite, see the module's docstring). Every required field must be given."""
    if _VALIDATE:
        return cls(**values)
    template, names, order = _template(cls)
    model = cls.__new__(cls)
    assign = object.__setattr__
    every_field_in_order = len(values) == len(names) and tuple(values) == order
    # NOTE: given every field in declaration order, the keyword dict is already what validation would keep.
    assign(model, "__dict__", values if every_field_in_order else {**template, **values})
    # NOTE: the fields given, as validation records them; given them all, one shared set per class (a frozen model
    # never adds to it; model_copy copies it first).
    assign(model, "__pydantic_fields_set__", names if len(values) == len(names) else set(values))
    assign(model, "__pydantic_extra__", None)
    assign(model, "__pydantic_private__", None)
    return model
