"""``python -m dbqueue_sa.cli``: the ``dbqueue`` command."""

import sys

from dbqueue_sa.cli import main

sys.exit(main())
