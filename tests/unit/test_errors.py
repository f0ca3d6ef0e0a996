"""One error family: every exception class the library defines is a ReclaimError."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import shared
from shared.errors import Parked, ReclaimError


def _library_exceptions() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(shared.__path__, "shared."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _name, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("shared."):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_every_library_exception_is_a_reclaim_error() -> None:
    classes = _library_exceptions()
    assert len(classes) > 20  # the walk found the family, not nothing
    strays = [c.__qualname__ for c in classes if not issubclass(c, ReclaimError)]
    # Parked is no error: a stage's early end (a BaseException, like GeneratorExit, so a
    # stage's own `except Exception` does not swallow it; shared.features.waits)
    assert strays == ["Parked"]
    assert not issubclass(Parked, Exception)


def test_input_errors_are_still_value_errors() -> None:
    from shared import errors

    for cls in (
        errors.ConfigError,
        errors.InvalidInput,
        errors.InvalidRecord,
        errors.IllegalTransition,
        errors.SubmitError,
        errors.BadEvent,
    ):
        assert issubclass(cls, ValueError), cls
