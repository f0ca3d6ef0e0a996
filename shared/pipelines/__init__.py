"""The pipeline registry: submit checks names against it, claim runs from it.

Built-in pipelines register themselves on import (``demo``, ``upload-digest``);
see the README section "Writing a pipeline" for how to write one.
"""

from __future__ import annotations

from shared.pipelines.base import (
    OutputWriter,
    PermanentError,
    Pipeline,
    Stage,
    StageContext,
    Stopped,
    UnknownPipeline,
)

__all__ = [
    "OutputWriter",
    "PermanentError",
    "Pipeline",
    "Stage",
    "StageContext",
    "Stopped",
    "UnknownPipeline",
    "get_pipeline",
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


def _register_builtins() -> None:
    from shared.pipelines import demo, upload_digest

    for pipeline in (demo.PIPELINE, upload_digest.PIPELINE):
        if pipeline.name not in _REGISTRY:
            register(pipeline)


_register_builtins()
