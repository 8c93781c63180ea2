"""``python -m minikafka.export export|replay ...``: the export CLI without the broker's entry point."""

import sys

from minikafka.export.cli import main

sys.exit(main())
