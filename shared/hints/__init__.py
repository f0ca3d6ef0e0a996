"""Small objects under ``hints/`` that tell the hot paths what they may skip: the index
board (which feature indexes may hold an entry: an idle sweep lists pending/ alone) and
the due hint (a freed claim slot lists pending/ only once a job was marked due).
docs/capacity.md gives their costs."""
