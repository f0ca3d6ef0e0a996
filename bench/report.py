"""Render the benchmark results as the Markdown table the README shows (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HEADER = (
    "| benchmark | measured | against (same run) | ratio | target | met |\n"
    "|---|---|---|---|---|---|"
)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _met(value: object) -> str:
    return {True: "yes", False: "**no**"}.get(value, "-")  # type: ignore[call-overload]


def markdown(results: Mapping[str, Any]) -> str:
    """The table, then a numbered note for every row that carries one."""
    lines = [HEADER]
    notes: list[str] = []
    for bench in results.get("benchmarks", {}).values():
        for r in bench.get("rows", []):
            mark = ""
            if r.get("note"):
                if r["note"] not in notes:
                    notes.append(r["note"])
                mark = f" [{notes.index(r['note']) + 1}]"
            lines.append(
                "| "
                + " | ".join(
                    _cell(x)
                    for x in (
                        r["name"] + mark,
                        r["figure"],
                        r["baseline"],
                        r["ratio"],
                        r["target"],
                        _met(r.get("met")),
                    )
                )
                + " |"
            )
    env = results.get("environment", {})
    lines.append("")
    lines.append(
        f"Measured {results.get('generated_at', '?')} on {env.get('platform', '?')}, "
        f"{env.get('cpus', '?')} CPUs, Python {env.get('python', '?')}; "
        f"`{results.get('command', 'make bench')}` "
        f"(local cloud: fake-gcs-server + the project's Pub/Sub emulator)."
    )
    earlier = [
        f"{name} ({bench.get('measured_at', 'before entries were dated')})"
        for name, bench in results.get("benchmarks", {}).items()
        if bench.get("run") != results.get("run")  # measured by an earlier run
    ]
    beside = [
        name
        for name, bench in results.get("benchmarks", {}).items()
        if bench.get("lane") == "beside"  # in the run that measured it (this one or earlier)
    ]
    if beside:
        lines.append("")
        lines.append(
            "Measured in processes of their own beside the others (bench/lanes.py: rows "
            "judged on counts or on wide bounds): " + ", ".join(beside) + "."
        )
    if earlier:
        lines.append("")
        lines.append("Kept from earlier runs, measured then: " + ", ".join(earlier) + ".")
    if notes:
        lines.append("")
        lines += [f"[{i}] {_cell(n)}" for i, n in enumerate(notes, 1)]
    return "\n".join(lines) + "\n"
