"""``python -m topcal.cli``."""

import sys

from . import main

sys.exit(main())
