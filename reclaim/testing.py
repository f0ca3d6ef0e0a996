"""The local cloud for your tests: the same emulators and functions `reclaim dev` runs,
on free ports, serving your project's pipelines.

    with local_cloud(PROJECT_DIR, log_dir=tmp) as cloud:
        requests.post(cloud.endpoints["jobs"], json={"pipeline": ..., "payload": ...})

A project made by `reclaim init` uses it in tests/conftest.py.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reclaim.cli.project import load
from reclaim.local.cloud import LocalCloud

__all__ = ["LocalCloud", "local_cloud"]


def local_cloud(
    project: Path | str,
    *,
    pipeline_modules: Sequence[str] | None = None,
    log_dir: Path | str | None = None,
    **config: Any,
) -> LocalCloud:
    """A LocalCloud (start it with `with`) whose functions import the project's
    [tool.reclaim] pipeline_modules (or `pipeline_modules`) from its app_dir. `config`
    takes any other CloudConfig field (max_instances, concurrency, function_env, ...)."""
    root = Path(project).resolve()
    found = load(root)
    if pipeline_modules is None:
        if found is None:
            raise ValueError(f"{root}/pyproject.toml has no [tool.reclaim]: name the modules")
        pipeline_modules = found.pipeline_modules
    app_dir = found.app_dir if found is not None else root
    if str(app_dir) not in sys.path:  # the launcher checks schedules and routes by importing
        sys.path.insert(0, str(app_dir))
    env = {**config.pop("function_env", {}), "RECLAIM_PIPELINE_MODULES": ",".join(pipeline_modules)}
    logs = (
        Path(log_dir)
        if log_dir is not None
        else root / ".reclaim" / "test-logs" / uuid.uuid4().hex[:8]
    )
    return LocalCloud.for_tests(function_env=env, python_path=(app_dir,), log_dir=logs, **config)
