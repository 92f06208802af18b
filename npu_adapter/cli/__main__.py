"""``python -m npu_adapter.cli``."""

import sys

from npu_adapter.cli import main

sys.exit(main())
