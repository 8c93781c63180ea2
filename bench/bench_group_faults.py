"""Consumer groups under faults: no committed offset rewound, no partition owned twice.

A 3-broker cluster (plus ZooKeeper): kafka-python members of one group consume a 6-partition
RF 3 topic that a producer keeps writing to, and commit explicit offsets after every poll. A
nemesis meanwhile alternates, on the group's coordinator: a leader move of its
``__consumer_offsets`` partition to another broker (the controller's preferred election),
and a network partition cutting it from ZooKeeper and the other brokers (clients still reach
it) for ``--cut-seconds``, during which a member is replaced (the group rebalances), then
healed. Members commit only partitions whose position moved, and the producer is slow, so
partitions stay quiet between commits. Snapshots are taken every 20 events, so coordinators
load from them as leadership comes and goes. Two figures, both must be 0:

* committed offsets rewound: a reader fetches the group's committed offsets (OffsetFetch)
  every 0.2 s from the leader of its ``__consumer_offsets`` partition as ZooKeeper records
  it; an offset below one whose commit was acknowledged before that fetch began is a rewind
  (a deposed coordinator that does not know it yet answers older offsets, as Kafka's does:
  those are counted apart as stale reads);
* partitions owned twice in a generation: every assignment a member receives is recorded
  with its generation; two members given one partition in the same generation count.

    python3 bench/bench_group_faults.py --minutes 3

prints what the nemesis did, the counts of commits acknowledged and failed, rebalances, and
the two figures; exits 1 if either is not 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer
from kazoo.exceptions import NoNodeError
from kafka.structs import OffsetAndMetadata

from minikafka.broker.groups.records import partition_for
from minikafka.protocol.apis import ApiKey
from minikafka.testing import MinikafkaCluster, kafka_request

TOPIC = "work"
PARTITIONS = 6
GROUP = "bench-faults"
OFFSETS_PARTITIONS = 3
MEMBERS = 3
OVERRIDES = {
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "offsets.snapshot.interval.events": "20",
    "replica.lag.time.max.ms": "3000",
}


class History:
    """What members and the reader saw; shared by their threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[int, int] = defaultdict(lambda: -1)   # partition -> highest acked commit
        self.commits_acked = 0
        self.commits_failed = 0
        self.owners: dict[tuple[int, int], set[str]] = defaultdict(set)   # (generation, partition) -> members
        self.rewinds: list[str] = []
        self.stale_reads = 0

    def assigned(self, generation: int, member: str, partitions) -> None:
        with self.lock:
            for tp in partitions:
                self.owners[(generation, tp.partition)].add(member)

    def owned_twice(self) -> list[tuple[int, int, set[str]]]:
        return [(g, p, m) for (g, p), m in sorted(self.owners.items()) if len(m) > 1]


def member(bootstrap: str, history: History, stop: threading.Event) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=10000,
                             heartbeat_interval_ms=1000, request_timeout_ms=30000,
                             # The rebalance timeout: a coordinator completes a rebalance
                             # without the members that do not rejoin within it, well inside
                             # a cut, so two coordinators may each complete one.
                             max_poll_interval_ms=4000)

    class Listener:
        def on_partitions_revoked(self, revoked) -> None:
            pass

        def on_partitions_lost(self, lost) -> None:
            pass

        def on_partitions_assigned(self, assigned) -> None:
            generation = consumer._coordinator._generation
            history.assigned(generation.generation_id, generation.member_id, assigned)

    from kafka import ConsumerRebalanceListener
    ConsumerRebalanceListener.register(Listener)
    consumer.subscribe([TOPIC], listener=Listener())
    last: dict = {}
    try:
        while not stop.is_set():
            try:
                consumer.poll(timeout_ms=200)
                # Only what moved: a partition nobody writes to keeps its last commit, the
                # one a snapshot or a failover must not lose.
                offsets = {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in consumer.assignment()}
                offsets = {tp: o for tp, o in offsets.items() if last.get(tp) != o.offset}
                if not offsets:
                    continue
                consumer.commit(offsets)
                last.update({tp: o.offset for tp, o in offsets.items()})
            except Exception:
                with history.lock:
                    history.commits_failed += 1
                time.sleep(0.2)
                continue
            with history.lock:
                history.commits_acked += 1
                for tp, committed in offsets.items():
                    history.acked[tp.partition] = max(history.acked[tp.partition], committed.offset)
    finally:
        consumer.close(autocommit=False)


def offset_fetch(broker) -> dict[int, int] | None:
    """The group's committed offsets as ``broker`` answers them; None if it does not."""
    try:
        answer = kafka_request(broker.bootstrap, ApiKey.OFFSET_FETCH, 1, {
            "group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}]},
            timeout=5)
    except OSError:
        return None
    entries = answer.topics[0].partitions
    if any(p.error_code for p in entries):
        return None
    return {p.partition_index: p.committed_offset for p in entries}


def claimed_coordinator(cluster: MinikafkaCluster) -> int | None:
    """The coordinator a client is sent to: the first running broker's FindCoordinator answer."""
    for broker in cluster.brokers:
        if broker.running:
            try:
                found = kafka_request(broker.bootstrap, ApiKey.FIND_COORDINATOR, 0, {"key": GROUP}, timeout=5)
            except OSError:
                continue
            return None if found.error_code else found.node_id
    return None


def reader(cluster: MinikafkaCluster, history: History, stop: threading.Event) -> None:
    """Rewinds are judged on the answers of the partition's leader as ZooKeeper records it:
    the committed state. A client may also be sent to a deposed coordinator that does not
    know it yet (cut off from ZooKeeper; Kafka's does the same): its older answers are
    counted apart, as stale reads."""
    while not stop.is_set():
        with history.lock:
            acked_before = dict(history.acked)
        leader = zk_leader(cluster)
        committed = offset_fetch(cluster.broker(leader)) if leader > 0 else None
        for partition, offset in (committed or {}).items():
            if offset < acked_before.get(partition, -1):
                with history.lock:
                    history.rewinds.append(f"{time.strftime('%H:%M:%S')} partition {partition}: broker {leader} "
                                           f"answered {offset} after {acked_before[partition]} was acknowledged")
        claimed = claimed_coordinator(cluster)
        if claimed is not None and claimed != leader:
            stale = offset_fetch(cluster.broker(claimed)) or {}
            if any(offset < acked_before.get(partition, -1) for partition, offset in stale.items()):
                with history.lock:
                    history.stale_reads += 1
        time.sleep(0.2)


def zk_leader(cluster: MinikafkaCluster) -> int:
    from minikafka.replication.kafka_zk import decode_leader_isr, partition_state_path

    index = partition_for(GROUP, OFFSETS_PARTITIONS)
    try:
        data = cluster._zk().get(partition_state_path("__consumer_offsets", index))[0]
    except NoNodeError:   # not created yet
        return -1
    return decode_leader_isr("__consumer_offsets", index, data).leader


def producer(bootstrap: str, stop: threading.Event) -> None:
    sender = KafkaProducer(bootstrap_servers=bootstrap, acks=1, retries=5)
    n = 0
    while not stop.is_set():
        # Slow, so that partitions stay quiet between their commits.
        sender.send(TOPIC, str(n).encode(), partition=n % PARTITIONS)
        n += 1
        time.sleep(0.3)
    sender.close(timeout=5)


def under_replicated(cluster: MinikafkaCluster) -> list[str]:
    return [f"{t.name}-{p.partition_index} ISR {sorted(p.isr_nodes)} of {sorted(p.replica_nodes)}"
            for t in cluster.metadata(["__consumer_offsets", TOPIC]).topics for p in t.partitions
            if sorted(p.isr_nodes) != sorted(p.replica_nodes)]


class Members:
    """The group's members, each a thread; ``replace`` stops the oldest (LeaveGroup) and
    starts a new one, so the group rebalances."""

    def __init__(self, bootstrap: str, history: History) -> None:
        self.bootstrap = bootstrap
        self.history = history
        self.running: list[tuple[threading.Thread, threading.Event]] = []
        self.stopped: list[threading.Thread] = []

    def start(self) -> None:
        stop = threading.Event()
        thread = threading.Thread(target=member, args=(self.bootstrap, self.history, stop), daemon=True)
        thread.start()
        self.running.append((thread, stop))

    def replace(self) -> None:
        thread, stop = self.running.pop(0)
        stop.set()
        self.stopped.append(thread)
        self.start()

    def stop_all(self) -> None:
        for thread, stop in self.running:
            stop.set()
        for thread in [t for t, _ in self.running] + self.stopped:
            thread.join(timeout=60)


def nemesis(cluster: MinikafkaCluster, members: Members, seconds: float, cut_seconds: float, log) -> None:
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline:
        time.sleep(5)
        current = zk_leader(cluster)
        if step % 2 == 0:
            target = current % len(cluster.ids) + 1
            try:
                cluster.move_leader("__consumer_offsets", partition_for(GROUP, OFFSETS_PARTITIONS), target)
                log(f"moved the coordinator {current} -> {target}")
            except Exception as exc:
                log(f"leader move {current} -> {target} refused: {exc}")
        else:
            log(f"cut coordinator {current} from ZooKeeper and the other brokers")
            cluster.partition([current])
            members.replace()
            log("replaced a member: the group rebalances while cut")
            time.sleep(cut_seconds)
            cluster.heal()
            log(f"healed; coordinator now {zk_leader(cluster)}")
            try:
                cluster.wait_for_full_isr(timeout=30)
            except TimeoutError:
                log(f"not every replica back in sync 30 s after healing: {under_replicated(cluster)}")
        step += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--cut-seconds", type=float, default=12.0)
    args = parser.parse_args()
    start = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - start:7.1f} s] {message}", flush=True)

    with tempfile.TemporaryDirectory() as work, MinikafkaCluster(Path(work), 3, OVERRIDES) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS, 3)
        history = History()
        stop = threading.Event()
        threads = [threading.Thread(target=producer, args=(cluster.bootstrap, stop), daemon=True)]
        members = Members(cluster.bootstrap, history)
        for _ in range(MEMBERS):
            members.start()
        threads.append(threading.Thread(target=reader, args=(cluster, history, stop), daemon=True))
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 120
        while not history.owners:
            if time.monotonic() > deadline:
                raise TimeoutError("the group got no assignment in 120 s")
            time.sleep(0.5)
        log(f"{MEMBERS} members, coordinator {zk_leader(cluster)}; nemesis for {args.minutes} min")
        try:
            nemesis(cluster, members, args.minutes * 60, args.cut_seconds, log)
            time.sleep(10)          # members settle and commit after the last fault
        finally:
            stop.set()
            members.stop_all()
            for thread in threads:
                thread.join(timeout=60)
        twice = history.owned_twice()
        generations = len({generation for generation, _ in history.owners})
        print(f"commits acknowledged: {history.commits_acked}, failed: {history.commits_failed}; "
              f"generations with assignments: {generations}")
        print(f"committed offsets rewound: {len(history.rewinds)}")
        for line in history.rewinds[:20]:
            print(f"  {line}")
        print(f"stale reads from a deposed coordinator (informational): {history.stale_reads}")
        print(f"partitions owned twice in a generation: {len(twice)}")
        for generation, partition, members in twice[:20]:
            print(f"  generation {generation} partition {partition}: {sorted(members)}")
        return 1 if history.rewinds or twice else 0


if __name__ == "__main__":
    sys.exit(main())
