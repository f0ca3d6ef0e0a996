"""reclaim's public API: what a pipeline author imports.

    from reclaim import Pipeline, StageContext, register

Everything here is re-exported from the library (``shared``), whose other modules
may change between versions; code that imports only from ``reclaim`` keeps working.
README "Writing a pipeline" and docs/pipelines.md describe each name. The names load on
first use, so `reclaim.cli` and `reclaim.local` (the Pub/Sub emulator among them) start
without the library; importing reclaim first checks that the `shared` Python would
import is the one installed beside it (reclaim.install).
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reclaim.install import check_shared

check_shared()

if TYPE_CHECKING:
    from shared.errors import (
        NotFound as NotFound,
    )
    from shared.errors import (
        PermanentError as PermanentError,
    )
    from shared.errors import (
        PipelineModuleError as PipelineModuleError,
    )
    from shared.errors import (
        Stopped as Stopped,
    )
    from shared.errors import (
        UnknownPipeline as UnknownPipeline,
    )
    from shared.pipelines import (
        OutputWriter as OutputWriter,
    )
    from shared.pipelines import (
        Pipeline as Pipeline,
    )
    from shared.pipelines import (
        Stage as Stage,
    )
    from shared.pipelines import (
        StageContext as StageContext,
    )
    from shared.pipelines import (
        Waitpoint as Waitpoint,
    )
    from shared.pipelines import (
        get_pipeline as get_pipeline,
    )
    from shared.pipelines import (
        pipeline_names as pipeline_names,
    )
    from shared.pipelines import (
        register as register,
    )

__version__ = (Path(__file__).resolve().parent / "VERSION").read_text(encoding="utf-8").strip()
"""The one version: the wheel's (pyproject reads the same file) and the terraform
module's (its `version` output)."""

_FROM = {
    **dict.fromkeys(
        ("NotFound", "PermanentError", "PipelineModuleError", "Stopped", "UnknownPipeline"),
        "shared.errors",
    ),
    **dict.fromkeys(
        (
            "OutputWriter",
            "Pipeline",
            "Stage",
            "StageContext",
            "Waitpoint",
            "get_pipeline",
            "pipeline_names",
            "register",
        ),
        "shared.pipelines",
    ),
}

__all__ = ["__version__", *sorted(_FROM)]


def __getattr__(name: str) -> Any:
    if name in _FROM:
        value = getattr(import_module(_FROM[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'reclaim' has no attribute {name!r}")
