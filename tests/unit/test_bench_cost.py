"""bench.cost's arithmetic (pure): measured counts in, dollars per 1,000 jobs out, and
every price it uses names its source page."""

from __future__ import annotations

import pytest

from bench.cost import HOURS_PER_MONTH, PRICES, idle_month, price


def test_costs_scale_to_1000_jobs_and_add_up() -> None:
    measured = {
        "jobs": 200,
        "instance_seconds": {"claim": 100.0, "submit": 10.0},
        "requests": {"claim": 210, "submit": 1},
        "gcs": {"read": 400, "write": 2000, "delete": 200, "list": 300, "other": 0},
        "publishes": 200,
        "pushes": 210,
    }
    c = price(measured)
    assert c["instance_seconds"] == {"claim": 500.0, "submit": 50.0}
    assert (c["gcs_class_a"], c["gcs_class_b"], c["requests"]) == (11500, 2000, 1055)
    assert c["pubsub_messages"] == 2050
    compute = 500 * (0.000024 + 0.0000025) + 50 * (0.000024 + 0.5 * 0.0000025)
    assert c["usd"]["compute"] == pytest.approx(compute, abs=1e-5)
    assert c["usd"]["gcs_class_a"] == pytest.approx(11500 * 0.005 / 1000, abs=1e-5)
    assert c["usd_per_1000_jobs"] == pytest.approx(sum(c["usd"].values()), abs=1e-3)
    assert c["vm_usd_per_month"] == pytest.approx(0.016751 * HOURS_PER_MONTH, abs=0.01)
    # the break-even volume costs what the VM costs (the sweep's fixed share aside)
    at_break_even = c["break_even_jobs_per_month"] / 1000 * c["usd_per_1000_jobs"]
    assert at_break_even + c["sweep_usd_per_month"] == pytest.approx(
        c["vm_usd_per_month"], rel=0.01
    )


def test_every_price_names_its_page() -> None:
    for key, p in PRICES.items():
        assert p["usd"] > 0, key
        assert p["source"].startswith("https://cloud.google.com/"), key
        assert isinstance(p["confirmed"], bool) and p["what"] and p["shown"].startswith("$"), key


def test_an_idle_month_prices_a_run_a_minute_the_daily_check_and_the_scheduler() -> None:
    idle = {
        "runs": 10,
        "calls": {"list": 10, "read": 10, "write": 0},
        "billed_s": 1.0,  # 100 ms a run
        "first_run_calls": {"list": 10, "read": 1, "write": 1},
    }
    month = idle_month(idle)
    assert (month["class_a_per_run"], month["class_b_per_run"]) == (1.0, 1.0)
    assert month["check_class_a"] == 10.0  # 11 in the first run, 1 in a plain one
    ticks = 60 * HOURS_PER_MONTH
    assert month["usd"]["gcs_class_a"] == pytest.approx(
        (ticks + HOURS_PER_MONTH / 24 * 10) * 0.005 / 1000, abs=1e-4
    )
    assert month["usd"]["compute"] == pytest.approx(
        ticks * 0.1 * (0.000024 + 0.5 * 0.0000025), abs=1e-4
    )
    assert month["usd"]["scheduler"] == pytest.approx(0.10 / 31 * HOURS_PER_MONTH / 24, abs=1e-4)
    assert month["usd_per_month"] == pytest.approx(sum(month["usd"].values()), abs=0.01)
