"""A job's outputs as its readers get them: which objects a job offers (only what its
committed stages wrote), listed with sizes and attempts, and fetched (committed.py)."""
