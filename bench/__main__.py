"""``python -m bench``: see :mod:`bench.run`."""

import sys

from bench.run import main

__all__ = []

sys.exit(main())
