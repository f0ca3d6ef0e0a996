"""A pipeline only a newer deploy has (test_run_jobs.py: rollout skew between a job pool's
claim and its Cloud Run job's image): `newer`, the `long` pipeline's stages."""

from shared.pipelines import Pipeline, register
from tests.integration.long_pipelines import STAGES

register(Pipeline("newer", stages=list(STAGES)), replace=True)
