"""``python -m seglog``: the same command line as the ``seglog`` script."""

import sys

from seglog.cli import main

sys.exit(main())
