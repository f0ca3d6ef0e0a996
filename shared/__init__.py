"""reclaim's library: the policy, the storage seam, the doorbell and the runners.

The function entry points in ``functions/`` are thin wrappers over this package.
"""
