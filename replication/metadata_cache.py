"""What a broker knows of the cluster: live brokers, the controller, every partition's state.

Kafka's MetadataCache: filled by the controller's UpdateMetadata requests (and by the
partition states of LeaderAndIsr), read by Metadata, FindCoordinator and the produce/fetch
leadership checks. Plain data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """A live broker: ``host``/``port`` is its inter-broker listener (what replica fetchers
    and controlled shutdown connect to); ``listeners`` every listener's address by name, for
    Metadata's answer on the listener a client came in on."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    listeners: dict[str, tuple[str, int]] = field(default_factory=dict, compare=False)

    def address(self, listener: str) -> tuple[str, int] | None:
        """The address of ``listener`` (None: the broker has no such listener); a broker
        described without listener names (UpdateMetadata v0) has only its one address."""
        if not self.listeners:
            return self.host, self.port
        return self.listeners.get(listener)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as the controller last described it (Kafka's UpdateMetadata state)."""

    leader: int              # -1: offline
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int


class MetadataCache:
    def __init__(self) -> None:
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.controller_id: int = -1
        self.controller_epoch: int = 0
        self._partitions: dict[str, dict[int, PartitionInfo]] = {}
        # Topic ids as read from ZooKeeper (UpdateMetadata v0-v3 carries none), kept while the
        # topic is: a topic created again under its name has another.
        self.topic_ids: dict[str, str] = {}

    def update(self, controller_id: int, controller_epoch: int, brokers: list[BrokerEndpoint],
               partitions: dict[tuple[str, int], PartitionInfo | None]) -> None:
        """Apply an UpdateMetadata: the live broker list is replaced; each named partition is
        set, or removed when its value is None (a deleted topic)."""
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self.brokers = {b.node_id: b for b in brokers}
        for (topic, partition), info in partitions.items():
            if info is None:
                topic_partitions = self._partitions.get(topic)
                if topic_partitions is not None:
                    topic_partitions.pop(partition, None)
                    if not topic_partitions:
                        del self._partitions[topic]
                        self.topic_ids.pop(topic, None)
            else:
                self._partitions.setdefault(topic, {})[partition] = info

    def update_partition(self, topic: str, partition: int, info: PartitionInfo) -> None:
        """A newer state of one partition than the last UpdateMetadata gave (from a
        LeaderAndIsr, or an ISR change this broker wrote as leader)."""
        current = self.partition(topic, partition)
        if current is None or (info.leader_epoch, info.zk_version) >= (current.leader_epoch, current.zk_version):
            self._partitions.setdefault(topic, {})[partition] = info

    def topics(self) -> dict[str, int]:
        return {topic: len(partitions) for topic, partitions in self._partitions.items()}

    def partitions(self, topic: str) -> dict[int, PartitionInfo] | None:
        partitions = self._partitions.get(topic)
        return dict(partitions) if partitions is not None else None

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        return self._partitions.get(topic, {}).get(partition)

    def has_topic(self, topic: str) -> bool:
        return topic in self._partitions

    def leader_endpoint(self, topic: str, partition: int) -> BrokerEndpoint | None:
        info = self.partition(topic, partition)
        if info is None or info.leader < 0:
            return None
        return self.brokers.get(info.leader)
