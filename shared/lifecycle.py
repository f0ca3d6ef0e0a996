"""Every feature's part in a job's life, in the order it runs: the one module that knows
them all.

`shared.finish` runs what follows a terminal write and `shared.gates` what stands between
"claimable" and the claim; neither imports a feature, so a feature may use them (expiry
ends a job, a workflow cascades a cancel) without an import loop. This module installs the
features into both when it is first imported; every module that ends or claims jobs
imports it (tests/unit/test_lifecycle.py checks each entry point).
"""

from __future__ import annotations

from shared import expiry, finish, flow, gates, uniqueness, workflows

HOOKS: tuple[finish.AfterTerminal, ...] = (
    uniqueness.release_on_terminal,  # time: a "while pending" unique key is released
    flow.record_ended,  # flow control: the ended/ index that bulk retry and cancel read
    flow.release,  # flow control: free the concurrency place, ring the oldest waiters
    workflows.batch_hook,  # the last member of a batch with on_complete creates the callback
    workflows.release_hook,  # release (or cancel) the children waiting on this job
)

REQUEUE_HOOKS: tuple[finish.AfterTerminal, ...] = (
    flow.release,  # flow control: a requeued, handed-back or rescued job's place goes back
)

GATES: tuple[gates.Gate, ...] = (
    expiry.gate,  # time: an expired job ends instead of running
    flow.pause_gate,  # flow control: a paused pipeline parks the job
    flow.limit_gate,  # flow control: at its key's limit, the job waits
    flow.rate_gate,  # flow control: over its rate, deferred (last: it reserves a token)
)


def install() -> None:
    """Put the features in place (idempotent; a test may swap them with monkeypatch)."""
    if finish.HOOKS is None:
        finish.HOOKS = HOOKS
    if finish.REQUEUE_HOOKS is None:
        finish.REQUEUE_HOOKS = REQUEUE_HOOKS
    if gates.GATES is None:
        gates.GATES = GATES


install()
