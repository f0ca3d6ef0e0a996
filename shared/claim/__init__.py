"""The claim machinery: one delivery claimed, run and drained (runner), the owner's fenced
writes (owned), the backlog drain, the push's time budget, concurrency slots, stage
timeouts and the hand-back on shutdown."""
