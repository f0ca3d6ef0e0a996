"""reclaim's library: the pure policy, the storage seam, the doorbell, the runners.

Its front door is ``shared.queue.Queue``; the function entry points in
``functions/`` and the ``reclaim`` CLI are thin wrappers over it.
"""
