"""Which packages the one wheel holds (the rest of its metadata is pyproject.toml's).

The library (shared), the CLI (shared.cli), the local cloud (local), the functions'
entry points (functions/<name>/main.py, loaded by path), the public API (reclaim), and
the terraform module, shipped from terraform/ as the data package reclaim.terraform.
The repository's example pipelines (pipelines/) stay out: a user's own `pipelines`
package must not collide with ours. docs/library.md says what each top-level name is.
"""

from setuptools import find_namespace_packages, setup

PACKAGES = [
    *find_namespace_packages(include=["shared", "shared.*", "local", "local.*"]),
    *find_namespace_packages(include=["functions.*"]),
    "reclaim",
    "reclaim.terraform",
]

setup(
    packages=[p for p in PACKAGES if "__pycache__" not in p],
    package_dir={"reclaim.terraform": "terraform"},
    package_data={
        "reclaim": ["VERSION", "py.typed"],
        "reclaim.terraform": ["*.tf", "README.md"],
        "shared": ["openapi.json", "dashboard/static/*", "dashboard/templates/*"],
        "local.pubsub_emulator": ["README.md"],
        "local.scaffold": ["template/*.tmpl", "template/*/*.tmpl"],
        "functions.claim": ["requirements.txt"],
        "functions.admin": ["requirements.txt"],
        "functions.dashboard": ["requirements.txt"],
        "functions.submit": ["requirements.txt"],
        "functions.sweep": ["requirements.txt"],
    },
)
