"""Injected errors and delays for tests, after librdkafka's mock cluster
(``rd_kafka_mock_push_request_errors`` / ``..._error_rtts``).

A test queues *faults* for an API: each of the next N requests of that API takes one, in
order. A fault is a Kafka error code (``NONE`` for "no error") and a delay in milliseconds.
A queue may be limited to one topic or one topic-partition; it then serves only requests
that name it. Every matching queue gives one fault to a request, so queues for two
partitions both fire on a request that carries both.

What the client gets back is a well-formed response of the version it asked for:

* per-partition APIs (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, OffsetCommit,
  OffsetFetch): the error in the slot of each partition it applies to (every partition of the
  request for a queue without a topic). The other partitions are served for real by the
  handler, on a copy of the request without the failed ones, so a failed Produce partition
  writes nothing while its neighbours append as usual. A failed ``acks=0`` Produce closes the
  connection, as the real one does.
* Metadata: the broker's real answer with the error written into each topic (or into the one
  topic / partition of a limited queue).
* CreateTopics, DeleteTopics, DescribeGroups: the error for every topic / group named.
* the group APIs and ApiVersions: the error at top level.

A delay is slept before the request is handled (the largest of its faults' delays); like any
slow request it holds up the requests behind it on the same connection, not other ones.

A dropped response (``drop_responses``): the request is handled for real and the connection
then closed instead of answered, as when the network loses a response. The client cannot tell
that from a request that never arrived: a producer retries a batch the log already holds (the
duplicate an idempotent producer's sequence numbers exist to catch).

Nothing here is reachable from the Kafka listener: the broker creates a ``FaultInjector``
only when started with ``minikafka.test.control.port`` (``serve --test-control``), and tests
reach it through ``broker/control.py``'s channel.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

import trio

from minikafka.broker.handlers import CloseConnection
from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.protocol.schema import Struct

logger = logging.getLogger(__name__)

MAX_FAULTS_PER_COMMAND = 10_000
MAX_DELAY_MS = 3_600_000
# Faults served, newest last, kept for tests to check what their clients met.
SERVED_HISTORY = 1000

# Names Kafka has used for APIs we serve, besides the current ones.
_API_ALIASES = {"offsets": ApiKey.LIST_OFFSETS, "groupcoordinator": ApiKey.FIND_COORDINATOR}


class FaultError(ValueError):
    """A fault command that cannot be carried out; the message says why in one sentence."""


def _squash(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def api_name(api: int) -> str:
    """Kafka's CamelCase name of an API key (``ListOffsets``)."""
    return "".join(part.capitalize() for part in ApiKey(api).name.split("_"))


def parse_api(value: Any) -> ApiKey:
    """An API by key number or by name in any case (``"Produce"``, ``"LIST_OFFSETS"``,
    ``"ListOffsets"``, Kafka's old ``"Offsets"``/``"GroupCoordinator"``)."""
    if isinstance(value, bool):
        raise FaultError(f"unknown API {value!r}")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("-").isdigit()):
        try:
            return ApiKey(int(value))
        except ValueError:
            raise FaultError(f"API key {value} is not served by this broker") from None
    if isinstance(value, str):
        wanted = _squash(value.strip())
        for key in ApiKey:
            if _squash(key.name) == wanted:
                return key
        if wanted in _API_ALIASES:
            return _API_ALIASES[wanted]
    raise FaultError(f"unknown API {value!r} (use a Kafka API name such as 'Produce' or its key)")


def parse_error_code(value: Any) -> int:
    """A Kafka error by number (any int16) or by name, current or 0.10.2
    (``NOT_LEADER_FOR_PARTITION`` is 6), in any case."""
    if isinstance(value, bool):
        raise FaultError(f"unknown Kafka error {value!r}")
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, int):
        if not -32768 <= value <= 32767:
            raise FaultError(f"error code {value} does not fit Kafka's int16")
        return value
    if isinstance(value, str):
        try:
            return int(ErrorCode[value.strip().upper()])
        except KeyError:
            pass
    raise FaultError(f"unknown Kafka error {value!r} (use a name such as "
                     f"'NOT_LEADER_FOR_PARTITION' or a number)")


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


@dataclass(frozen=True, slots=True)
class Fault:
    """What one request meets: an error code (0: none), a delay before it is handled, and
    whether its response is dropped (the connection closed instead)."""

    error: int = 0
    delay_ms: int = 0
    drop_response: bool = False


# ---------------------------------------------------------------------------------- shapes
#
# How each API's request names its topic-partitions and where an error goes in its response.


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def _set(obj: Any, name: str, value: Any) -> None:
    if isinstance(obj, dict):
        obj[name] = value
    else:
        setattr(obj, name, value)


@dataclass(frozen=True)
class _Partitioned:
    """Topics holding partitions, in the request and in the response.

    ``req_partition`` None: the request lists partitions as plain ints (OffsetFetch).
    ``fill``: the partition fields an error answer sets besides its index and error code.
    ``extra``: top-level response fields of an answer built without the handler.
    ``hurry``: request fields set when the handler serves the partitions left after some
    failed (a Fetch with an error answers at once instead of long-polling, as in Kafka).
    """

    req_topics: str
    req_topic: str
    req_partitions: str
    req_partition: str | None
    resp_topics: str
    resp_topic: str
    resp_partitions: str
    resp_partition: str
    fill: dict = dataclasses.field(default_factory=dict)
    extra: dict = dataclasses.field(default_factory=dict)
    hurry: dict = dataclasses.field(default_factory=dict)

    def slots(self, body: Struct) -> list[tuple[str, int]]:
        return [(_get(topic, self.req_topic), self._index(partition))
                for topic in (_get(body, self.req_topics) or ())
                for partition in _get(topic, self.req_partitions) or ()]

    def _index(self, partition: Any) -> int:
        return partition if self.req_partition is None else _get(partition, self.req_partition)

    def without(self, body: Struct, dropped: set[tuple[str, int]]) -> Struct:
        """A copy of the request body without the ``dropped`` partitions (and the topics left
        empty by that)."""
        topics = []
        for topic in _get(body, self.req_topics) or ():
            name = _get(topic, self.req_topic)
            kept = [p for p in _get(topic, self.req_partitions) or () if (name, self._index(p)) not in dropped]
            if kept:
                topics.append(Struct(**{**topic.__dict__, self.req_partitions: kept}))
        return Struct(**{**body.__dict__, **(self.hurry if dropped else {}), self.req_topics: topics})

    def answer(self, body: Struct, errors: dict[tuple[str, int], int], served: dict | None,
               top_error: int) -> dict:
        """The response: the error for each partition in ``errors``, the handler's answer
        (``served``) for the others, topics and partitions in request order."""
        real: dict[tuple[str, int], Any] = {}
        response: dict = dict(self.extra)
        if served is not None:
            response.update(served if isinstance(served, dict) else served.__dict__)
            for topic in _get(served, self.resp_topics) or ():
                name = _get(topic, self.resp_topic)
                for partition in _get(topic, self.resp_partitions) or ():
                    real[(name, _get(partition, self.resp_partition))] = partition
        if top_error:
            response["error_code"] = top_error  # OffsetFetch v2+; ignored where there is none
        topics: dict[str, list] = {}
        for slot in self.slots(body):
            if slot in errors:
                entry = {**self.fill, self.resp_partition: slot[1], "error_code": errors[slot]}
            elif slot in real:
                entry = real[slot]
            else:
                continue
            topics.setdefault(slot[0], []).append(entry)
        response[self.resp_topics] = [{self.resp_topic: name, self.resp_partitions: partitions}
                                      for name, partitions in topics.items()]
        return response


@dataclass(frozen=True)
class _PerName:
    """A list of names (topics, groups) answered one entry each (CreateTopics, DeleteTopics,
    DescribeGroups). ``req_name`` None: the request lists plain strings."""

    req_list: str
    req_name: str | None
    resp_list: str
    resp_name: str

    def answer(self, body: Struct, error: int) -> dict:
        names = [item if self.req_name is None else _get(item, self.req_name)
                 for item in _get(body, self.req_list) or ()]
        return {self.resp_list: [{self.resp_name: name, "error_code": error} for name in names]}


@dataclass(frozen=True)
class _TopLevel:
    """One error for the whole request; ``fill`` sets the fields that mean "nothing"."""

    fill: dict = dataclasses.field(default_factory=dict)

    def answer(self, error: int) -> dict:
        return {**self.fill, "error_code": error}


class _Metadata:
    """The broker's own answer with errors written in: it carries the broker list the client
    needs to go on, and Metadata changes nothing a client would not ask for again."""

    @staticmethod
    def names(body: Struct, version: int) -> list[str] | None:
        """The topics asked for, None for all of them (null, or in v0 an empty list)."""
        topics = _get(body, "topics")
        if topics is None or (version == 0 and not topics):
            return None
        return [_get(topic, "name") for topic in topics]

    @staticmethod
    def patch(response: Any, top: int, topic_errors: dict[str, int],
              partition_errors: dict[tuple[str, int], int]) -> Any:
        for topic in _get(response, "topics") or ():
            name = _get(topic, "name")
            error = topic_errors.get(name) or top
            if error:
                _set(topic, "error_code", error)
            # Errors go into copies of the partition entries: the handler may share them
            # between answers (Metadata builds them once per topic size).
            patched = []
            for partition in _get(topic, "partitions") or ():
                error = partition_errors.get((name, _get(partition, "partition_index")))
                if error and isinstance(partition, dict):
                    partition = {**partition, "error_code": error}
                elif error:
                    _set(partition, "error_code", error)
                patched.append(partition)
            if patched:
                _set(topic, "partitions", patched)
        return response


_SHAPES: dict[ApiKey, Any] = {
    ApiKey.PRODUCE: _Partitioned("topic_data", "name", "partition_data", "index",
                                 "responses", "name", "partition_responses", "index",
                                 fill={"base_offset": -1, "log_append_time_ms": -1},
                                 extra={"throttle_time_ms": 0}),
    ApiKey.FETCH: _Partitioned("topics", "topic", "partitions", "partition",
                               "responses", "topic", "partitions", "partition_index",
                               fill={"high_watermark": -1, "records": b""},
                               extra={"throttle_time_ms": 0}, hurry={"max_wait_ms": 0}),
    ApiKey.LIST_OFFSETS: _Partitioned("topics", "name", "partitions", "partition_index",
                                      "topics", "name", "partitions", "partition_index"),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _Partitioned("topics", "topic", "partitions", "partition",
                                                 "topics", "topic", "partitions", "partition"),
    ApiKey.OFFSET_COMMIT: _Partitioned("topics", "name", "partitions", "partition_index",
                                       "topics", "name", "partitions", "partition_index"),
    ApiKey.OFFSET_FETCH: _Partitioned("topics", "name", "partition_indexes", None,
                                      "topics", "name", "partitions", "partition_index",
                                      fill={"committed_offset": -1, "metadata": ""}),
    ApiKey.METADATA: _Metadata(),
    ApiKey.CREATE_TOPICS: _PerName("topics", "name", "topics", "name"),
    ApiKey.DELETE_TOPICS: _PerName("topic_names", None, "responses", "name"),
    ApiKey.DESCRIBE_GROUPS: _PerName("groups", None, "groups", "group_id"),
    ApiKey.FIND_COORDINATOR: _TopLevel({"node_id": -1, "host": "", "port": -1}),
    ApiKey.JOIN_GROUP: _TopLevel(),
    ApiKey.HEARTBEAT: _TopLevel(),
    ApiKey.LEAVE_GROUP: _TopLevel(),
    ApiKey.SYNC_GROUP: _TopLevel({"assignment": b""}),
    ApiKey.LIST_GROUPS: _TopLevel(),
    ApiKey.API_VERSIONS: _TopLevel(),
}

_TOPIC_APIS = frozenset(api for api, shape in _SHAPES.items() if isinstance(shape, (_Partitioned, _Metadata)))


# ---------------------------------------------------------------------------------- queues


@dataclass
class _Queue:
    api: ApiKey
    topic: str | None
    partition: int | None
    faults: deque

    def describe(self) -> dict:
        return {"api": api_name(self.api), "topic": self.topic, "partition": self.partition,
                "faults": [{"error": error_name(f.error), "ms": f.delay_ms, "drop_response": f.drop_response}
                           for f in self.faults]}


class FaultInjector:
    """The fault queues of one broker and the request path that serves them (``handle``)."""

    def __init__(self) -> None:
        self._queues: dict[tuple[ApiKey, str | None, int | None], _Queue] = {}
        self.served: deque[dict] = deque(maxlen=SERVED_HISTORY)

    # ------------------------------------------------------------------ commands

    def inject(self, api: Any, errors: list, *, topic: str | None = None,
               partition: int | None = None, delay_ms: int = 0) -> None:
        """The next ``len(errors)`` requests of ``api`` (naming ``topic``/``partition`` when
        given) are answered with these errors, in order, each after ``delay_ms``."""
        if not isinstance(errors, (list, tuple)) or not errors:
            raise FaultError("errors: give a non-empty list of Kafka error names or numbers")
        codes = [parse_error_code(error) for error in errors]
        if any(codes) and parse_api(api) not in _SHAPES:
            raise FaultError(f"errors cannot be injected into {api_name(parse_api(api))} yet "
                             "(no response shape for it in broker/fault_injection.py); delays can")
        self._push(api, [Fault(code, _delay(delay_ms)) for code in codes], topic, partition)

    def delay(self, api: Any, delay_ms: int, *, count: int = 1, topic: str | None = None,
              partition: int | None = None) -> None:
        """The next ``count`` requests of ``api`` are handled ``delay_ms`` late, for real."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise FaultError(f"count: {count!r} is not a positive integer")
        self._push(api, [Fault(0, _delay(delay_ms))] * count, topic, partition)

    def drop_responses(self, api: Any, *, count: int = 1, topic: str | None = None,
                       partition: int | None = None) -> None:
        """The next ``count`` requests of ``api`` are handled for real, and the connection
        each came on is closed instead of answered."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise FaultError(f"count: {count!r} is not a positive integer")
        self._push(api, [Fault(drop_response=True)] * count, topic, partition)

    def clear(self, api: Any = None) -> int:
        """Drop the queued faults (of ``api`` only, when given); returns how many."""
        key = None if api is None else parse_api(api)
        dropped = 0
        for queue_key, queue in list(self._queues.items()):
            if key is None or queue.api == key:
                dropped += len(queue.faults)
                del self._queues[queue_key]
        return dropped

    def pending(self) -> list[dict]:
        return [queue.describe() for queue in self._queues.values()]

    def _push(self, api: Any, faults: list[Fault], topic: Any, partition: Any) -> None:
        key = parse_api(api)
        if len(faults) > MAX_FAULTS_PER_COMMAND:
            raise FaultError(f"at most {MAX_FAULTS_PER_COMMAND} faults per command")
        if topic is not None and (not isinstance(topic, str) or not topic):
            raise FaultError(f"topic: {topic!r} is not a topic name")
        if partition is not None:
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise FaultError(f"partition: {partition!r} is not a partition number")
            if topic is None:
                raise FaultError("partition: give the topic too")
        if topic is not None and key not in _TOPIC_APIS:
            raise FaultError(f"{api_name(key)} requests name no topic-partitions; inject without a topic")
        if len(faults) + sum(len(q.faults) for q in self._queues.values()) > 10 * MAX_FAULTS_PER_COMMAND:
            raise FaultError("too many faults queued; clear some first")
        queue = self._queues.setdefault((key, topic, partition), _Queue(key, topic, partition, deque()))
        queue.faults.extend(faults)
        logger.info("queued %d fault(s) for %s%s", len(faults), api_name(key),
                    f" on {topic}" + ("" if partition is None else f"-{partition}") if topic else "")

    # ------------------------------------------------------------------ request path

    async def handle(self, handler, broker, request) -> dict | None:
        """Answer ``request`` as ``handler`` would, with the faults it takes from the queues."""
        if request.body is None or not self._queues:
            return await handler(broker, request)
        api = ApiKey(request.api_key)
        shape = _SHAPES.get(api)
        taken = self._take(api, shape, request)
        if not taken:
            return await handler(broker, request)
        delay_ms = max(fault.delay_ms for _, fault in taken)
        errors = [(where, fault.error) for where, fault in taken if fault.error]
        drop_response = any(fault.drop_response for _, fault in taken)
        self.served.append({
            "api": api_name(api), "correlation_id": request.correlation_id,
            "client_id": request.client_id, "delay_ms": delay_ms, "drop_response": drop_response,
            "errors": [{"topic": t, "partition": p, "error": error_name(e)} for (t, p), e in errors]})
        if errors:
            logger.info("injecting %s into %s request %d from %s", [error_name(e) for _, e in errors],
                        api_name(api), request.correlation_id, request.client_id)
        if drop_response:
            await self._answer(shape, handler, broker, request, delay_ms, errors)
            raise CloseConnection(f"injected: the response to {api_name(api)} request {request.correlation_id} "
                                  "is dropped")
        return await self._answer(shape, handler, broker, request, delay_ms, errors)

    async def _answer(self, shape: Any, handler, broker, request, delay_ms: int, errors: list) -> dict | None:
        """The response, after the delay: the handler's, with the errors put in."""
        if delay_ms:
            await trio.sleep(delay_ms / 1000)
        if not errors:
            return await handler(broker, request)
        top = next((error for (topic, _), error in errors if topic is None), 0)
        if isinstance(shape, _Partitioned):
            return await self._partitioned(shape, handler, broker, request, top, errors)
        if isinstance(shape, _Metadata):
            return _Metadata.patch(await handler(broker, request), top,
                                   {t: e for (t, p), e in errors if t is not None and p is None},
                                   {(t, p): e for (t, p), e in errors if p is not None})
        if isinstance(shape, _PerName):
            return shape.answer(request.body, top)
        return shape.answer(top)

    def _take(self, api: ApiKey, shape: Any, request) -> list[tuple[tuple[str | None, int | None], Fault]]:
        """One fault from every queue of ``api`` that this request matches, each with where it
        applies: (None, None) everywhere, (topic, None) that topic, (topic, p) that partition."""
        if isinstance(shape, _Partitioned):
            slots = set(shape.slots(request.body))
            topics = {topic for topic, _ in slots}
        elif isinstance(shape, _Metadata):
            names = _Metadata.names(request.body, request.api_version)
            slots, topics = None, None if names is None else set(names)
        else:
            slots, topics = set(), set()
        taken = []
        for (queue_api, topic, partition), queue in list(self._queues.items()):
            if queue_api != api:
                continue
            if topic is not None:
                if topics is not None and topic not in topics:
                    continue
                if partition is not None and slots is not None and (topic, partition) not in slots:
                    continue
            taken.append(((topic, partition), queue.faults.popleft()))
            if not queue.faults:
                del self._queues[(queue_api, topic, partition)]
        return taken

    async def _partitioned(self, shape: _Partitioned, handler, broker, request, top: int,
                           errors: list) -> dict | None:
        specific = {where: error for where, error in errors if where[0] is not None}
        failed: dict[tuple[str, int], int] = {}
        for slot in shape.slots(request.body):
            error = specific.get(slot) or specific.get((slot[0], None)) or top
            if error:
                failed[slot] = error
        produce_acks_0 = request.api_key == ApiKey.PRODUCE and request.body.acks == 0
        served = None
        rest = shape.without(request.body, set(failed))
        if _get(rest, shape.req_topics):
            served = await handler(broker, request.replace(body=rest))
        if produce_acks_0:
            # No response to put the error in: closing is how Kafka tells such a producer.
            raise CloseConnection(f"injected {[error_name(e) for e in failed.values()]} into an acks=0 produce")
        return shape.answer(request.body, failed, served, top)


def _delay(ms: Any) -> int:
    if isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms <= MAX_DELAY_MS:
        raise FaultError(f"ms: {ms!r} is not a whole number of milliseconds from 0 to {MAX_DELAY_MS}")
    return ms
