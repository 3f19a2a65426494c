"""Records: frozen dataclasses to the type checker, plain dataclasses at run time.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` (the class
itself refuses assignment), several hundred instructions a field where a plain dataclass's
assignment costs tens. The paid path builds a handful of records per request (the request to
sell, the verified call, the answers, the admission, the settle's and the request's outcomes):
frozen, they cost about 67,000 instructions a request (counted under callgrind, in-process),
more than half of what the flow's own work cost above the chain's (124,000). ``@record``
keeps what ``frozen=True`` gives every caller that is type-checked: ``mypy --strict`` refuses
an assignment to a field (``frozen_default``), equality and hashing are by the fields, as a
frozen dataclass's; only the run-time ``FrozenInstanceError`` is gone.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar, dataclass_transform

__all__ = ["record"]

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: type[T]) -> type[T]:
    """``@record class X: ...``: a dataclass that is frozen to the type checker (see the module's
    docstring), hashed by its fields like a frozen one."""
    return dataclasses.dataclass(unsafe_hash=True)(cls)
