"""``python -m minikafka.broker`` is the ``minikafka`` command."""

import sys

from minikafka.broker.cli import main

sys.exit(main())
