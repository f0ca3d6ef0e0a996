"""The pipeline registry: submit checks names against it, claim runs from it.

Built-in pipelines register themselves on import (``demo``, ``upload-digest``);
yours register when the modules named in RECLAIM_PIPELINE_MODULES are imported
at start (see the README section "Writing a pipeline").
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable

from shared.errors import PermanentError, PipelineModuleError, Stopped, UnknownPipeline
from shared.pipelines.base import OutputWriter, Pipeline, Stage, StageContext, Waitpoint

__all__ = [
    "OutputWriter",
    "PermanentError",
    "Pipeline",
    "PipelineModuleError",
    "Stage",
    "StageContext",
    "Stopped",
    "UnknownPipeline",
    "Waitpoint",
    "builtin_pipeline_names",
    "get_pipeline",
    "load_modules",
    "pipeline_names",
    "register",
]

_REGISTRY: dict[str, Pipeline] = {}


def register(pipeline: Pipeline, *, replace: bool = False) -> Pipeline:
    """Add a pipeline; a second one under the same name is a mistake unless replace."""
    if pipeline.name in _REGISTRY and not replace:
        raise ValueError(f"pipeline {pipeline.name!r} is already registered")
    _REGISTRY[pipeline.name] = pipeline
    return pipeline


def get_pipeline(name: str) -> Pipeline:
    """The pipeline registered under name, or UnknownPipeline."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownPipeline(str(name)) from None


def pipeline_names() -> list[str]:
    """Registered names, sorted (for error messages and the CLI)."""
    return sorted(_REGISTRY)


def load_modules(names: Iterable[str]) -> None:
    """Import the modules that register the deployment's own pipelines (idempotent)."""
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # user code at import may raise anything: report it, named
            raise PipelineModuleError(
                f"RECLAIM_PIPELINE_MODULES names {name!r}, which cannot be imported: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


def _builtins() -> tuple[Pipeline, ...]:
    from shared.pipelines import demo, upload_digest, webhook

    return (demo.PIPELINE, upload_digest.PIPELINE, webhook.PIPELINE)


def builtin_pipeline_names() -> list[str]:
    """The pipelines every deployment knows (terraform's builtin_pipelines must match)."""
    return sorted(p.name for p in _builtins())


def _register_builtins() -> None:
    for pipeline in _builtins():
        if pipeline.name not in _REGISTRY:
            register(pipeline)


_register_builtins()
