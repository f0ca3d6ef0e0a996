"""Entry point of a pool's Cloud Run job (RECLAIM_RUNNER=job): one execution adopts one
claim and runs its stages (shared.claim.task; docs/long-stages.md).

The job runs the claim function's own image with this file as its command
(terraform/run_jobs.tf), so the stages run on the same code and pipelines as claim.
"""

import sys

from shared.claim.task import main

if __name__ == "__main__":
    sys.exit(main())
