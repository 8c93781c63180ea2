"""A ZooKeeper and N ``minikafka serve`` processes forming one cluster for a test, with the
faults a cluster meets (kill, stop, restart, pause, network partitions through
:mod:`minikafka.testing.link_proxy`, leader moves), each returning once it has taken effect."""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING

from minikafka.testing.broker import (BrokerCrashed, MinikafkaBroker, close_all, finish_in_background, free_port,
                                      jaas_escape, new_ca, write_properties)
from minikafka.testing.clients import client_settings, create_topics_body, kafka_request
from minikafka.testing.control import ControlError

if TYPE_CHECKING:
    from minikafka.testing.link_proxy import LinkProxy

__all__ = ["MinikafkaCluster", "ZOOKEEPER", "BROKER_USER"]

ZOOKEEPER = "zookeeper"
"""The ZooKeeper server's name in :meth:`MinikafkaCluster.partition`'s groups."""

BROKER_USER = "broker"
"""The user a secured cluster's brokers authenticate to each other as (``User:broker``, to
put in ``super.users`` when an authorizer is on)."""


class MinikafkaCluster:
    """A ZooKeeper and ``brokers`` minikafka processes forming one cluster (broker ids 1..N).

    ``zookeeper`` is a connect string of a ZooKeeper to use (a fresh chroot is taken in it);
    without one the cluster starts its own (Debian's ``zookeeper`` package). ``bootstrap``
    lists every broker; ``brokers[i]`` are :class:`MinikafkaBroker` objects (``broker(id)``
    by id); ``leader(topic, partition)`` and ``controller()`` ask the cluster itself.

    Faults (README, "Faults on a cluster"), each reversible and each returning once it has
    taken effect: ``kill``, ``stop``, ``restart``, ``pause`` / ``resume``, ``partition`` /
    ``heal``, ``move_leader``. For ``partition`` every broker reaches every other broker and
    ZooKeeper through a :class:`~minikafka.testing.link_proxy.LinkProxy` of that one link
    (``links=False`` connects them directly and leaves ``partition`` unavailable). Clients
    always reach the brokers directly.

    Security: with ``security_protocol`` ("SSL", "SASL_PLAINTEXT", "SASL_SSL") every broker
    has a second listener of that name, which is also ``inter.broker.listener.name``: the
    brokers replicate over it and authenticate to each other as ``BROKER_USER`` (with
    ``sasl_mechanism``, PLAIN by default; SCRAM users go to ZooKeeper's
    ``/config/users``), certificates come from ``ca`` (a ``trustme.CA``), ``users`` are the
    clients' accounts and ``client_config()`` the settings a client needs. The first listener
    stays PLAINTEXT for the fixture's own look-ups (as ``User:ANONYMOUS``: a super user when an
    authorizer is on), and the link proxies forward to the
    inter-broker listener. These settings go in each broker's ``security.properties`` (mode
    0600, ``broker.config_path``), the overrides, which come after them, on the command line.
    ``broker_overrides`` gives single brokers settings of their own.
    """

    def __init__(self, work_dir: Path | str, brokers: int = 3, overrides: dict[str, str] | None = None, *,
                 zookeeper: str | None = None, start_timeout: float = 60.0, links: bool = True,
                 fault_timeout: float = 60.0, security_protocol: str = "PLAINTEXT",
                 sasl_mechanism: str | None = None, users: dict[str, str] | None = None, ca=None,
                 ssl_client_auth: str = "none",
                 broker_overrides: dict[int, dict[str, str]] | None = None) -> None:
        import secrets
        import uuid

        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._own_zookeeper = None
        if zookeeper is None:
            from minikafka.replication.zk_server import ZooKeeperServer

            self._own_zookeeper = ZooKeeperServer(self.work_dir / "zookeeper")
        self._zookeeper_base = zookeeper
        self.chroot = f"/minikafka-{uuid.uuid4().hex[:12]}"
        self.overrides = {str(k): str(v) for k, v in (overrides or {}).items()}
        self.size = brokers
        self.start_timeout = start_timeout
        self.fault_timeout = fault_timeout
        self.brokers: list[MinikafkaBroker] = []
        self.use_links = links
        # (from broker id, to broker id or ZOOKEEPER) -> the proxy of that directed link
        self.links: dict[tuple[int, int | str], "LinkProxy"] = {}
        self._kazoo = None
        self.security_protocol = security_protocol.upper()
        if self.security_protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"security_protocol {security_protocol!r} is not one of PLAINTEXT, SSL, "
                             "SASL_PLAINTEXT, SASL_SSL")
        self.sasl_mechanism = sasl_mechanism or ("PLAIN" if "SASL" in self.security_protocol else None)
        self.users = dict(users or {})
        self.ca = ca
        self.ssl_client_auth = ssl_client_auth
        self.ca_path: Path | None = None
        # The brokers' own account on the inter-broker listener (never a client's).
        self.broker_password = secrets.token_urlsafe(16)
        self.broker_overrides = {b: {str(k): str(v) for k, v in o.items()}
                                 for b, o in (broker_overrides or {}).items()}
        # Broker id -> the port its inter-broker listener binds, chosen before it starts so the
        # link proxies know it at once (and a restart binds it again).
        self._inter_broker_ports: dict[int, int] = {}

    @property
    def zookeeper_connect(self) -> str:
        base = self._own_zookeeper.connect_string if self._own_zookeeper is not None else self._zookeeper_base
        return base + self.chroot

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.running)

    @property
    def ids(self) -> list[int]:
        return list(range(1, self.size + 1))

    def broker(self, broker_id: int) -> MinikafkaBroker:
        return self.brokers[broker_id - 1]

    def start(self, *, settle: bool = True) -> "MinikafkaCluster":
        """Start ZooKeeper and every broker not running, the brokers at once (each start
        returns at its ready line: the broker then answers clients with a complete view of
        the cluster). ``settle`` also waits until the first broker's metadata lists them all;
        without it the cluster is used as a client meets it right after the ready lines."""
        if self._own_zookeeper is not None and self._own_zookeeper.process is None:
            self._own_zookeeper.start()
        if not self.brokers:
            if self.security_protocol != "PLAINTEXT":
                self._inter_broker_ports = {broker_id: free_port() for broker_id in self.ids}
                self._add_scram_users()
            if self.use_links:
                self._open_links()
            for broker_id in self.ids:
                overrides = {"zookeeper.connect": self.zookeeper_connect, "broker.id": str(broker_id),
                             "zookeeper.session.timeout.ms": "4000",
                             "controlled.shutdown.retry.backoff.ms": "500", **self.overrides,
                             **self.broker_overrides.get(broker_id, {})}
                if self.use_links:
                    zk_proxy = self.links[(broker_id, ZOOKEEPER)].address
                    overrides["zookeeper.connect"] = f"{zk_proxy[0]}:{zk_proxy[1]}{self.chroot}"
                    overrides["minikafka.test.broker.dial"] = ",".join(
                        f"{to}={proxy.address[0]}:{proxy.address[1]}"
                        for (frm, to), proxy in sorted(self.links.items(), key=str) if frm == broker_id and to != ZOOKEEPER)
                broker = MinikafkaBroker(self.work_dir / f"broker-{broker_id}", overrides,
                                         start_timeout=self.start_timeout)
                if self.security_protocol != "PLAINTEXT":
                    broker.config_path = write_properties(broker.work_dir / "security.properties",
                                                           self._security_overrides(broker_id))
                if self.use_links:
                    # A broker registers, and is dialled through its proxies, a moment before it
                    # prints the port it bound; a port chosen here is known to the proxy at once.
                    broker.port = free_port()
                self.brokers.append(broker)
        starting = [broker for broker in self.brokers if not broker.running]
        if len(starting) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(len(starting)) as pool:
                for started in [pool.submit(broker.start) for broker in starting]:
                    started.result()
        elif starting:
            starting[0].start()
        if settle:
            self.wait_until(lambda m: len(m.brokers) == self.size, "every broker registered")
        return self

    @property
    def inter_broker_listener(self) -> str:
        """The name of the listener the brokers dial each other on."""
        named = self.overrides.get("inter.broker.listener.name") or self.overrides.get("security.inter.broker.protocol")
        return (named or self.security_protocol).upper()

    def _security_overrides(self, broker_id: int) -> dict[str, str]:
        """The second listener, its certificates and the broker's own SASL account."""
        protocol = self.security_protocol
        if protocol == "PLAINTEXT":
            return {}
        prefix = f"listener.name.{protocol.lower()}"
        props = {"listeners": f"PLAINTEXT://127.0.0.1:0,{protocol}://127.0.0.1:{self._inter_broker_ports[broker_id]}",
                 "inter.broker.listener.name": protocol}
        if protocol in ("SSL", "SASL_SSL"):
            if self.ca is None:
                self.ca = new_ca()
            self.ca_path = self.work_dir / "ca.pem"
            self.ca.cert_pem.write_to_path(str(self.ca_path))
            keystore = self.work_dir / f"broker-{broker_id}.pem"
            self.ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(keystore))
            props.update({f"{prefix}.ssl.keystore.location": str(keystore),
                          f"{prefix}.ssl.truststore.location": str(self.ca_path),
                          f"{prefix}.ssl.client.auth": self.ssl_client_auth,
                          "ssl.endpoint.identification.algorithm": "HTTPS"})
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = self.sasl_mechanism
            props.update({f"{prefix}.sasl.enabled.mechanisms": mechanism,
                          "sasl.mechanism.inter.broker.protocol": mechanism})
            own = f'username="{BROKER_USER}" password="{jaas_escape(self.broker_password)}"'
            if mechanism == "PLAIN":
                accounts = " ".join(f'user_{user}="{jaas_escape(password)}"'
                                    for user, password in {BROKER_USER: self.broker_password, **self.users}.items())
                props[f"{prefix}.plain.sasl.jaas.config"] = \
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {own} {accounts};"
            else:
                props[f"{prefix}.{mechanism.lower()}.sasl.jaas.config"] = \
                    f"org.apache.kafka.common.security.scram.ScramLoginModule required {own};"
        return props

    def _add_scram_users(self) -> None:
        """The brokers' and the clients' SCRAM credentials, where a cluster keeps them."""
        if self.sasl_mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512") or "SASL" not in self.security_protocol:
            return
        from minikafka.broker.security.scram import with_password
        from minikafka.replication.kafka_zk import encode_topic_config, user_config_path

        for user, password in {BROKER_USER: self.broker_password, **self.users}.items():
            path = user_config_path(user)
            self._zk().ensure_path(path)
            self._zk().set(path, encode_topic_config(with_password({}, password, [self.sasl_mechanism])))

    def client_config(self, client: str = "kafka-python", *, user: str | None = None, certificate=None) -> dict:
        """Settings for ``client`` ("kafka-python", "aiokafka", "confluent-kafka") to reach
        the running brokers' ``security_protocol`` listeners as ``user`` (default: the first
        of ``users``); see :meth:`MinikafkaBroker.client_config`."""
        if self.security_protocol == "PLAINTEXT":
            return client_settings(client, bootstrap=self.bootstrap, security_protocol="PLAINTEXT",
                                   sasl_mechanism=None, users={}, user=None, ca_path=None, certificate=None,
                                   work_dir=self.work_dir)
        if certificate is None and self.ssl_client_auth == "required":
            certificate = self.ca.issue_cert("client.client.test", common_name="client")
        bootstrap = ",".join(f"127.0.0.1:{self._inter_broker_ports[b]}" for b in self.ids if self.broker(b).running)
        return client_settings(client, bootstrap=bootstrap, security_protocol=self.security_protocol,
                               sasl_mechanism=self.sasl_mechanism, users=self.users, user=user,
                               ca_path=self.ca_path, certificate=certificate, work_dir=self.work_dir)

    def _open_links(self) -> None:
        from minikafka.testing.link_proxy import LinkProxy

        zk_host, _, zk_port = self.zookeeper_connect.split("/", 1)[0].split(",")[0].rpartition(":")

        zk = self._zk()  # made here: the proxies' threads read registrations through it

        def broker_address(broker_id: int):
            # Where the brokers dial each other: the inter-broker listener, at the port chosen
            # for it here, or the one the broker printed, or the first listener's when that is
            # the inter-broker one. Before its ready line a broker's own choice of port (port 0)
            # is known only from its registration, and the ready line waits for what the
            # controller sends through here: read the registration (None without one: the
            # proxy waits).
            broker = self.broker(broker_id)
            if not broker.running:
                return None
            name = self.inter_broker_listener
            if broker_id in self._inter_broker_ports:
                port = self._inter_broker_ports[broker_id]
            elif name == "PLAINTEXT":
                port = broker.port
            else:
                port = broker.listener_ports.get(name)
            if not port:
                port = _registered_port(zk, broker_id, name)
            return (broker.host, port) if port else None

        for frm in self.ids:
            self.links[(frm, ZOOKEEPER)] = LinkProxy(f"{frm}->zookeeper", lambda: (zk_host, int(zk_port)))
            for to in self.ids:
                if to != frm:
                    self.links[(frm, to)] = LinkProxy(f"{frm}->{to}", lambda to=to: broker_address(to))

    def metadata(self, topics: list[str] | None = None, *, via: MinikafkaBroker | None = None):
        """A Metadata v1 answer from ``via`` (default: the first running, unpaused broker,
        preferring one that ZooKeeper can reach: a broker cut off answers from a stale view)."""
        from minikafka.protocol.apis import ApiKey

        answering = [b for b in self.ids if self.broker(b).running and not self.broker(b).paused]
        target = via or self.broker(next((b for b in answering if not self._is_cut(b, ZOOKEEPER)),
                                         next(iter(answering))))
        body = {"topics": None if topics is None else [{"name": t} for t in topics]}
        return kafka_request(target.bootstrap, ApiKey.METADATA, 1, body)

    def wait_until(self, condition, what: str, timeout: float = 30.0, *, via: MinikafkaBroker | None = None):
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            try:
                metadata = self.metadata(via=via)
                if condition(metadata):
                    return metadata
            except (OSError, StopIteration) as exc:
                last_error = exc
            time.sleep(0.05)
        raise TimeoutError(f"cluster: not {what} within {timeout} s ({last_error or 'condition false'})")

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader id as the cluster reports it (-1: none)."""
        for entry in self.metadata([topic]).topics:
            for p in entry.partitions:
                if p.partition_index == partition:
                    return p.leader_id
        raise KeyError(f"{topic}-{partition} is not in the cluster's metadata")

    def controller(self) -> int:
        return self.metadata().controller_id

    def high_watermark(self, topic: str, partition: int) -> int:
        """The partition's high watermark, as its leader answers ListOffsets (latest)."""
        from minikafka.protocol.apis import ApiKey

        leader = self.broker(self.leader(topic, partition))
        answer = kafka_request(leader.bootstrap, ApiKey.LIST_OFFSETS, 1, {"topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
        entry = answer.topics[0].partitions[0]
        if entry.error_code:
            raise RuntimeError(f"ListOffsets {topic}-{partition}: error {entry.error_code}")
        return entry.offset

    def replicas_below_high_watermark(self, high_watermarks: dict[tuple[str, int], int],
                                      timeout: float = 30.0, brokers: list[int] | None = None,
                                      ) -> dict[tuple[str, int], dict[int, bytes]]:
        """Each broker's bytes of each partition below its high watermark (its stored batches
        whose offset is below it, across its segments in order), once every replica has
        fetched that far or ``timeout`` passed (a follower's fetch is in flight for a moment
        after the ISR is full). Replicas that agree hold the same bytes. ``brokers``: those to
        compare (default all), for partitions not on every broker."""
        deadline = time.monotonic() + timeout
        while True:
            replicas = {tp: {broker_id: _stored_bytes_below(self.broker(broker_id).log_dir / f"{tp[0]}-{tp[1]}", hw)
                             for broker_id in (self.ids if brokers is None else brokers)}
                        for tp, hw in high_watermarks.items()}
            if all(len(set(r.values())) == 1 for r in replicas.values()) or time.monotonic() > deadline:
                return replicas
            time.sleep(0.2)

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3,
                     timeout: float = 60.0, **configs: str) -> None:
        """CreateTopics on the controller, then wait until every partition has a leader and
        a full ISR in the controller's metadata, and every running broker knows its leaders.
        ``configs`` are topic configs with ``_`` for ``.`` (``min_insync_replicas="2"``)."""
        from minikafka.protocol.apis import ApiKey
        from minikafka.protocol.errors import ErrorCode

        body = create_topics_body(name, partitions, replication_factor, timeout, configs)
        deadline = time.monotonic() + timeout
        while True:
            answer = kafka_request(self._controller_broker().bootstrap, ApiKey.CREATE_TOPICS, 0, body, timeout)
            code = answer.topics[0].error_code
            if code == ErrorCode.NONE:
                break
            if code != ErrorCode.NOT_CONTROLLER or time.monotonic() > deadline:
                raise ControlError(f"CreateTopics {name}: {ErrorCode(code).name}")
            time.sleep(0.1)
        self.wait_for_full_isr([name], timeout=timeout)
        self.wait_for_leaders(name, partitions, max(deadline - time.monotonic(), 1.0))

    def wait_for_leaders(self, topic: str, partitions: int, timeout: float = 30.0) -> None:
        """Wait until every running broker's metadata has a leader for partitions 0 ..
        ``partitions`` - 1 of ``topic``. The controller delivers to each broker on its own, and
        Kafka answers CreateTopics and CreatePartitions once the broker that took the request
        knows the leaders: a client's next request may go to a broker that does not yet."""
        deadline = time.monotonic() + timeout
        for broker_id in self._registered():
            broker = self.broker(broker_id)
            if broker.running and not broker.paused:
                self.wait_until(lambda m: all(_leader_in(m, topic, p) not in (None, -1) for p in range(partitions)),
                                f"{topic} led as broker {broker_id} sees it", max(deadline - time.monotonic(), 1.0),
                                via=broker)

    def wait_for_full_isr(self, topics: list[str] | None = None, timeout: float | None = None):
        """Wait until every partition (of ``topics``, default all) has a leader and every
        assigned replica in its ISR, as the controller reports it; returns that metadata."""
        def complete(metadata) -> bool:
            listed = [t for t in metadata.topics if topics is None or t.name in topics]
            if topics is not None and len(listed) < len(topics):
                return False
            return all(t.error_code == 0 and p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes)
                       for t in listed for p in t.partitions)

        return self.wait_until(complete, f"every partition fully in sync ({topics or 'all topics'})",
                               timeout or self.fault_timeout, via=self._controller_broker())

    # ------------------------------------------------------------------ faults

    def kill(self, broker_id: int) -> None:
        """SIGKILL the broker; returns once ZooKeeper has expired its session and the
        controller has moved its leaderships (it counts as gone in the controller's metadata)."""
        self.broker(broker_id).kill()
        self._wait_registered(broker_id, False)

    def stop(self, broker_id: int) -> None:
        """Controlled shutdown (SIGTERM: the broker asks the controller to move its
        leaderships first); returns once the controller counts it as gone."""
        self.broker(broker_id).stop()
        self._wait_registered(broker_id, False)

    def restart(self, broker_id: int, *, clean: bool = True) -> None:
        """Start a stopped or killed broker again on its data directory (a running one is
        stopped first: SIGTERM, or SIGKILL with ``clean=False``); returns once the controller
        counts it as live. It rejoins its partitions' ISRs once it has caught up
        (``wait_for_full_isr``)."""
        broker = self.broker(broker_id)
        if broker.running:
            if clean:
                self.stop(broker_id)
            else:
                self.kill(broker_id)
        broker.start()
        self._wait_registered(broker_id, True)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP the broker; returns once the kernel reports it stopped. The cluster notices
        after ``zookeeper.session.timeout.ms``, when its session expires."""
        self.broker(broker_id).pause()

    def resume(self, broker_id: int) -> None:
        """SIGCONT a paused broker; returns once it runs again."""
        self.broker(broker_id).resume()

    def partition(self, group_a, group_b=None) -> None:
        """Cut every link between the two groups of broker ids (``ZOOKEEPER`` names the
        ZooKeeper server; ``group_b`` defaults to everything not in ``group_a``, ZooKeeper
        included). Live connections are closed and new ones refused, both ways. Returns once
        the links are cut and, for running brokers cut from ZooKeeper, once ZooKeeper has
        expired their sessions (after ``zookeeper.session.timeout.ms``) and the controller,
        if one is left, counts them as gone. Cuts add up until :meth:`heal`."""
        if not self.use_links:
            raise ControlError("this cluster was started with links=False: its brokers connect directly")
        nodes = set(self.ids) | {ZOOKEEPER}
        a = set(group_a)
        b = nodes - a if group_b is None else set(group_b)
        unknown = (a | b) - nodes
        if unknown or a & b or not a or not b:
            raise ValueError(f"partition: groups {sorted(a, key=str)} and {sorted(b, key=str)} must be "
                             f"disjoint, non-empty sets of {sorted(nodes, key=str)}")
        for x in a:
            for y in b:
                for link in ((x, y), (y, x)):
                    if link in self.links:
                        self.links[link].cut()
        cut_from_zk = [x for x in (a if ZOOKEEPER in b else b if ZOOKEEPER in a else ())
                       if x != ZOOKEEPER and self.broker(x).running]
        for broker_id in cut_from_zk:
            self._wait_registered(broker_id, False)

    def heal(self) -> None:
        """Reconnect every cut link; returns once every running, unpaused broker is
        registered again and the controller counts it as live."""
        for link in self.links.values():
            link.heal()
        for broker in self.brokers:
            if broker.running and not broker.paused:
                self._wait_registered(self.brokers.index(broker) + 1, True)

    def _is_cut(self, frm: int, to: int | str) -> bool:
        link = self.links.get((frm, to))
        return link is not None and link.cut_off

    def cut_links(self) -> list[tuple[int, int | str]]:
        """The directed links cut now."""
        return sorted((k for k, link in self.links.items() if link.cut_off), key=str)

    def move_leader(self, topic: str, partition: int, to: int) -> None:
        """Make broker ``to`` the partition's leader through the controller: the request goes
        to ZooKeeper's ``/admin/preferred_replica_election`` as kafka-preferred-replica-election.sh
        writes it, with ``to`` in minikafka's ``minikafka.leader`` field (the assignment's
        order is left alone). Returns once every live broker's metadata shows the new leader;
        ControlError if the controller refused (``to`` is not a live replica in the ISR)."""
        from kazoo.exceptions import NodeExistsError

        from minikafka.replication.kafka_zk import (
            PREFERRED_REPLICA_ELECTION_PATH, decode_leader_isr, encode_preferred_replica_election,
            partition_state_path,
        )

        zk = self._zk()
        deadline = time.monotonic() + self.fault_timeout
        request = encode_preferred_replica_election([(topic, partition, to)])
        while True:
            try:
                zk.create(PREFERRED_REPLICA_ELECTION_PATH, request, makepath=True)
                break
            except NodeExistsError:  # the controller is still on an earlier request
                self._before(deadline, "the previous preferred replica election to finish")
        while zk.exists(PREFERRED_REPLICA_ELECTION_PATH) is not None:
            self._before(deadline, f"a controller to take the election of {topic}-{partition}")
        state = decode_leader_isr(topic, partition, zk.get(partition_state_path(topic, partition))[0])
        if state.leader != to:
            raise ControlError(f"{topic}-{partition}: the controller did not elect broker {to} "
                               f"(leader {state.leader}, ISR {state.isr})")
        for broker_id in self._registered():
            broker = self.broker(broker_id)
            if broker.running and not broker.paused:
                self.wait_until(lambda m: _leader_in(m, topic, partition) == to,
                                f"leader of {topic}-{partition} {to} as broker {broker_id} sees it",
                                max(deadline - time.monotonic(), 1.0), via=broker)

    def _before(self, deadline: float, what: str) -> None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"cluster: waited {self.fault_timeout} s for {what}")
        time.sleep(0.05)

    def _zk(self):
        """The fixture's own ZooKeeper session (direct, never through a link proxy)."""
        if self._kazoo is None:
            from kazoo.client import KazooClient

            hosts = self.zookeeper_connect.split("/", 1)[0]
            root = KazooClient(hosts=hosts)  # the chroot first: SCRAM users go in before any broker
            root.start(timeout=15)
            try:
                root.ensure_path(self.chroot)
            finally:
                root.stop()
                root.close()
            self._kazoo = KazooClient(hosts=self.zookeeper_connect)
            self._kazoo.start(timeout=15)
        return self._kazoo

    def _registered(self) -> set[int]:
        return {int(child) for child in self._zk().get_children("/brokers/ids")}

    def _controller_broker(self) -> MinikafkaBroker:
        deadline = time.monotonic() + self.fault_timeout
        while True:
            found = self._zk().get("/controller") if self._zk().exists("/controller") else None
            if found is not None:
                from minikafka.replication.kafka_zk import decode_controller

                broker = self.broker(decode_controller(found[0]))
                if broker.running and not broker.paused:
                    return broker
            self._before(deadline, "a controller")

    def _wait_registered(self, broker_id: int, live: bool) -> None:
        """Until ZooKeeper holds (or has dropped) the broker's registration and every broker
        the controller can reach has metadata that agrees (so any client sees the change); a
        cluster where no broker can become controller is judged by ZooKeeper alone."""
        deadline = time.monotonic() + self.fault_timeout
        state = "live" if live else "gone"
        while (broker_id in self._registered()) != live:
            self._before(deadline, f"broker {broker_id} {state} in ZooKeeper")
        pending = None
        while True:
            try:
                # When the broker's session ends, so does a controllership it held: wait for the
                # next controller, if any broker can still reach ZooKeeper to become one.
                if not any(self.broker(b).running and not self.broker(b).paused and not self._is_cut(b, ZOOKEEPER)
                           for b in self.ids if b != broker_id or live):
                    return
                controller = self._controller_broker()
                controller_id = self.brokers.index(controller) + 1
                observers = [b for b in self._registered()
                             if self.broker(b).running and not self.broker(b).paused
                             and not self._is_cut(controller_id, b)]
                pending = [b for b in observers
                           if (broker_id in {n.node_id for n in self.metadata(via=self.broker(b)).brokers}) != live]
                if not pending:
                    return
            except OSError:
                pass
            self._before(deadline, f"broker {broker_id} {state} in the metadata of brokers {pending}")

    def close(self, *, wait: bool = True) -> None:
        """Stop every broker (clean shutdowns, one after another), then the link proxies and the
        ZooKeeper connection. Raises ``BrokerCrashed`` if a broker ever exited on its own.

        ``wait=False`` (the fixtures' teardown): crashes so far are reported at once, and the
        shutdowns go on in a thread while the next test runs (:func:`finish_stopping` waits for
        them): they take seconds, as Kafka's do — each broker's controlled shutdown waits for the
        controller to move its leaderships, and the last one's retries find no broker to take them."""
        if wait:
            self._close()
            return
        crashed = []
        for broker in self.brokers:
            broker.forget()
            if broker.unexpected_exits:
                crashed.append(broker)
        finish_in_background(self._close_quietly, f"close cluster {self.work_dir}")
        if crashed:
            raise BrokerCrashed(f"broker {self.brokers.index(crashed[0]) + 1} exited on its own (status "
                                f"{', '.join(map(str, crashed[0].unexpected_exits))}):\n{crashed[0].stderr_tail()}")

    def _close_quietly(self) -> None:
        try:
            self._close()
        except BrokerCrashed:  # reported by close() already, or an exit after it was asked to stop
            pass

    def _close(self) -> None:
        try:
            close_all(self.brokers)
        finally:
            for link in self.links.values():
                link.close()
            if self._kazoo is not None:
                self._kazoo.stop()
                self._kazoo.close()
            if self._own_zookeeper is not None:
                self._own_zookeeper.stop()

    def __enter__(self) -> "MinikafkaCluster":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc_info) -> None:
        self.close()


def _registered_port(zk, broker_id: int, listener: str) -> int | None:
    """The port of ``listener`` in the broker's ZooKeeper registration (None: not registered)."""
    from kazoo.exceptions import NoNodeError

    from minikafka.replication.kafka_zk import decode_broker

    try:
        raw, _ = zk.get(f"/brokers/ids/{broker_id}")
    except NoNodeError:
        return None
    address = decode_broker(broker_id, raw).endpoints.get(listener)
    return address[1] if address else None


def _leader_in(metadata, topic: str, partition: int) -> int | None:
    for entry in metadata.topics:
        if entry.name == topic:
            for p in entry.partitions:
                if p.partition_index == partition:
                    return p.leader_id
    return None


def _stored_bytes_below(partition_dir: Path, high_watermark: int) -> bytes:
    """The log's message sets or batches (as stored: offset, size, body) whose offset is below
    the high watermark, across the segments in order."""
    out = bytearray()
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + 12 <= len(data):
            offset, size = struct.unpack_from(">qi", data, position)
            if offset >= high_watermark or position + 12 + size > len(data):
                return bytes(out)
            out += data[position:position + 12 + size]
            position += 12 + size
    return bytes(out)
