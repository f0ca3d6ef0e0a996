"""`python -m reclaim.cli`: the same as the `reclaim` console script."""

import sys

from reclaim.cli import main

sys.exit(main())
