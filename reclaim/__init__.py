"""reclaim's public API: what a pipeline author imports.

    from reclaim import Pipeline, StageContext, register

Everything here is re-exported from the library (``shared``), whose other modules
may change between versions; code that imports only from ``reclaim`` keeps working.
README "Writing a pipeline" and docs/pipelines.md describe each name.
"""

from __future__ import annotations

from pathlib import Path

from shared.errors import NotFound, PermanentError, PipelineModuleError, Stopped, UnknownPipeline
from shared.pipelines import (
    OutputWriter,
    Pipeline,
    Stage,
    StageContext,
    get_pipeline,
    pipeline_names,
    register,
)

__version__ = (Path(__file__).resolve().parent / "VERSION").read_text(encoding="utf-8").strip()
"""The one version: the wheel's (pyproject reads the same file) and the terraform
module's (its `version` output)."""

__all__ = [
    "NotFound",
    "OutputWriter",
    "PermanentError",
    "Pipeline",
    "PipelineModuleError",
    "Stage",
    "StageContext",
    "Stopped",
    "UnknownPipeline",
    "__version__",
    "get_pipeline",
    "pipeline_names",
    "register",
]
