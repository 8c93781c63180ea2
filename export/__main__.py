"""``python -m export export|replay ...``: the export CLI without the broker's entry point."""

import sys

from export.cli import main

sys.exit(main())
