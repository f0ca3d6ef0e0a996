"""This deployment's own pipelines, outside the reclaim library.

terraform ships this folder in every function archive beside ``shared/`` (variable
``pipelines_dir``; this folder by default) and the functions import the modules
named in ``RECLAIM_PIPELINE_MODULES`` (variable ``pipeline_modules``), e.g.
``pipelines.csv_summary``. A module registers its pipelines when it is imported.
"""
