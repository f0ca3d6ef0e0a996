"""The bench's pure parts: the verdict on the median of repeated runs (bench.spread) and
the results table (bench.report)."""

from __future__ import annotations

import pytest

from bench.common import row
from bench.report import HEADER, markdown
from bench.spread import Spread


def test_spread_is_median_min_max_of_the_runs() -> None:
    s = Spread.of([0.70, 0.55, 0.66, 0.81, 0.64])
    assert (s.median, s.low, s.high, s.runs) == (0.66, 0.55, 0.81, 5)
    assert Spread.of([2.0, 4.0]).median == 3.0
    assert s.shown() == "0.660 (median of 5; min 0.550, max 0.810)"
    assert Spread(**s.to_json()) == s


def test_spread_needs_a_run() -> None:
    with pytest.raises(ValueError):
        Spread.of([])


def test_the_verdict_is_on_the_median_not_the_worst_or_best_run() -> None:
    one_bad_run = Spread.of([0.62, 0.55, 0.65])
    assert one_bad_run.meets(0.6, at_least=True)
    one_lucky_run = Spread.of([0.50, 0.58, 0.91])
    assert not one_lucky_run.meets(0.6, at_least=True)
    # a bound from above: a median within it meets it whatever the slowest run did
    assert Spread.of([1.1, 1.15, 1.9]).meets(1.2, at_least=False)
    assert not Spread.of([1.1, 1.25, 1.3]).meets(1.2, at_least=False)
    assert Spread.of([0.6]).meets(0.6, at_least=True)


def _results(*rows: dict[str, object]) -> dict[str, object]:
    return {
        "generated_at": "2026-12-02 01:00 UTC",
        "command": "make bench",
        "environment": {"platform": "Linux x86_64", "cpus": 2, "python": "3.11.7"},
        "benchmarks": {"x": {"rows": list(rows)}},
    }


def test_the_table_has_a_line_per_row_with_its_verdict() -> None:
    ok = row("a | b", "1 s", "2 s", "0.50x", "<= 1x", True)
    missed = row("c", "3 s", "2 s", "1.50x", "<= 1x", False)
    neither = row("d", "$1", "prices", "-", "-", None)
    lines = markdown(_results(ok, missed, neither)).splitlines()
    assert lines[:2] == HEADER.splitlines()
    assert lines[2] == "| a \\| b | 1 s | 2 s | 0.50x | <= 1x | yes |"
    assert lines[3] == "| c | 3 s | 2 s | 1.50x | <= 1x | **no** |"
    assert lines[4] == "| d | $1 | prices | - | - | - |"
    assert lines[6].startswith("Measured 2026-12-02 01:00 UTC on Linux x86_64, 2 CPUs")


def test_notes_are_numbered_once_and_shared_by_rows_that_carry_the_same_one() -> None:
    a = row("a", "1", "1", "1", "1", True, "why a\nand more")
    b = row("b", "1", "1", "1", "1", True, "why a\nand more")
    c = row("c", "1", "1", "1", "1", True, "why c")
    text = markdown(_results(a, b, c))
    assert "| a [1] |" in text and "| b [1] |" in text and "| c [2] |" in text
    assert text.endswith("[1] why a and more\n[2] why c\n")


def test_a_spread_reads_in_the_table_as_median_min_and_max() -> None:
    ratio = Spread.of([0.7, 0.65, 0.74])
    r = row("tp", "x", "y", f"{ratio.shown()} of the floor", ">= 0.6 (median)", True)
    assert "| 0.700 (median of 3; min 0.650, max 0.740) of the floor |" in markdown(_results(r))
