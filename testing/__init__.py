"""minikafka's test harness, for any test runner: real ``minikafka serve`` processes for
other projects' tests and minikafka's own. The pytest fixtures
(``minikafka.broker.pytest_plugin``) are built on it; nothing here imports pytest, and the
broker, trio and kazoo are imported only when used.

- :class:`MinikafkaBroker` (``broker.py``): one broker process, its restarts, pauses and faults.
- :class:`MinikafkaCluster` (``cluster.py``): a ZooKeeper and N brokers, with the faults a
  cluster meets; network partitions cut the per-link proxies of ``link_proxy.py``.
- :func:`kafka_request` and :func:`client_settings` (``clients.py``): one raw request, and
  each client library's settings for a (secured) broker.
- ``control.py``: the client of a broker's test-control port; ``warm.py``: brokers forked from
  a pre-imported parent.
"""

from minikafka.testing.broker import BrokerCrashed, BrokerStartError, MinikafkaBroker
from minikafka.testing.clients import client_settings, kafka_request
from minikafka.testing.cluster import BROKER_USER, ZOOKEEPER, MinikafkaCluster
from minikafka.testing.control import ControlError

__all__ = ["MinikafkaBroker", "MinikafkaCluster", "ZOOKEEPER", "BROKER_USER", "BrokerStartError",
           "BrokerCrashed", "ControlError", "kafka_request", "client_settings"]
