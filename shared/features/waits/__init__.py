"""Stages that wait and fan out (docs/waiting.md): a stage ends early and its job parks.

A stage calls ``ctx.sleep``/``ctx.sleep_until``, ``ctx.wait(ctx.waitpoint(...))`` or
``ctx.fan_out(children)``; the runner writes the park at that stage boundary (status
``waiting``, the checkpoint at the next stage, the attempt given back, the slot and any
concurrency place freed) and the job holds no instance until something releases it: the
time index (a sleep's end, a waitpoint's timeout), a completion of its waitpoint, or the
end of its last child. The release is one compare-and-swap on the parked record, so a
job resumes exactly once whoever races.

- ``rules``: the pure half (the park and release fields, names, tokens, reasons, views);
- ``parking``: what a stage calls (the tools the runner hands it) and what follows a park;
- ``release``: the one release of a parked job, a completion, a wake and a timeout;
- ``fanout``: children created under ids derived from (parent, stage, index), the child's
  end, the stop of a failed fan-out, the paged read of the join stage;
- ``keys``: the waitpoint signing key;
- ``hooks``: the feature table's seams (view, terminal hook, sweep check and pass, gauges).
"""
