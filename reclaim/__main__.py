"""`python -m reclaim`: the same as the `reclaim` console script."""

import sys

from shared.cli import main

sys.exit(main())
