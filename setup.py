"""Which packages the one wheel holds (the rest of its metadata is pyproject.toml's).

Two top-level packages and nothing else: `reclaim` (the public API, the CLI as
reclaim.cli, the local cloud as reclaim.local) and `shared` (the library; top level
because the function archives import it by that name). The functions' entry points
(functions/<name>/main.py, loaded by path) and the terraform module ride along as package
data, reclaim.functions and reclaim.terraform, mapped from this repository's top-level
folders. The repository's example pipelines (pipelines/) stay out: a user's own
`pipelines` package must not collide with ours. docs/library.md says what each name is;
tests/unit/test_layout.py holds the top-level names to these two.
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = str(Path(__file__).resolve().parent)

PACKAGES = [
    *find_namespace_packages(HERE, include=["shared", "shared.*", "reclaim", "reclaim.*"]),
    "reclaim.functions",
    *(f"reclaim.{p}" for p in find_namespace_packages(HERE, include=["functions.*"])),
    "reclaim.terraform",
]

FUNCTIONS = ("admin", "claim", "dashboard", "submit", "sweep", "waitpoints")

if __name__ == "__main__":  # setuptools' build backend runs this file as __main__
    setup(
        packages=sorted({p for p in PACKAGES if "__pycache__" not in p}),
        package_dir={
            "reclaim.functions": "functions",
            **{f"reclaim.functions.{n}": f"functions/{n}" for n in FUNCTIONS},
            "reclaim.terraform": "terraform",
        },
        package_data={
            "reclaim": ["VERSION", "py.typed"],
            **{f"reclaim.functions.{n}": ["requirements.txt"] for n in FUNCTIONS},
            "reclaim.terraform": ["*.tf", "README.md"],
            "shared": [
                "openapi.json",
                "job_sizing.json",
                "dashboard/static/*",
                "dashboard/templates/*",
            ],
            "reclaim.local.pubsub_emulator": ["README.md"],
            "reclaim.local.scaffold": ["template/*.tmpl", "template/*/*.tmpl"],
        },
    )
