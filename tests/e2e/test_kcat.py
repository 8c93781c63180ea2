"""kcat (Debian's package: kcat 1.7 on librdkafka 2.0), default configuration.

kcat takes messages from stdin one per line, ``-K`` splits key from value, and ``-Z`` makes an
empty key or value a null one; consuming with ``-J`` prints one JSON envelope per message.

The issue's per-client bullets, as far as kcat can take part:

- every codec it offers, keys and null values: ``test_produce_consume_every_codec`` (and zstd,
  which it sends uncompressed here);
- a LogAppendTime topic shows the broker's time: ``test_log_append_time_topic_shows_the_broker_time``;
  a CreateTime topic refusing a stale timestamp is **not** tested with kcat: kcat 1.7's
  producer has no option to set a message timestamp (``kcat -h`` lists none; librdkafka
  stamps each message with the current time), so it cannot send a stale one. The other three
  clients' modules test the refusal;
- offsets for times, earliest and latest: ``test_offsets_for_times_earliest_and_latest``;
- topics auto-created: ``test_topic_is_auto_created_on_first_produce``. kcat has no admin
  API, so creating and deleting topics is tested with the other clients' admin APIs;
- message.max.bytes: tests/e2e/test_message_size.py; restart between produce and consume:
  tests/e2e/test_durability.py (kill -9 is not: kcat reports no per-message acknowledgement
  to check against).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")

CODECS = ["none", "gzip", "snappy", "lz4"]


def now_ms() -> int:
    return int(time.time() * 1000)


def kcat(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def kcat_produce(bootstrap, topic, lines, *extra, check=True):
    """Produce ``key:value`` lines (an empty side is null); wait for every delivery."""
    return kcat("-P", "-b", bootstrap, "-t", topic, "-K:", "-Z", *extra, stdin="".join(f"{line}\n" for line in lines),
                check=check)


def kcat_consume(bootstrap, topic, *extra, partition=0, offset="beginning"):
    """Every message from ``offset`` to the end of the partition, as kcat's JSON envelopes."""
    out = kcat("-C", "-b", bootstrap, "-t", topic, "-p", str(partition), "-o", offset, "-e", "-J", *extra).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


LINES = ["key-0:value-0", ":value without a key", "key-with-null-value:"] + [
    f"key-{i}:{f'value-{i}-' * 20}" for i in range(3, 60)
]
EXPECTED = [("key-0", "value-0"), (None, "value without a key"), ("key-with-null-value", None)] + [
    (f"key-{i}", f"value-{i}-" * 20) for i in range(3, 60)
]


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(broker, topic, stored_codecs, codec):
    kcat_produce(broker.bootstrap, topic, LINES, "-z", codec)
    messages = kcat_consume(broker.bootstrap, topic)
    assert [(m["key"], m["payload"]) for m in messages] == EXPECTED
    assert [m["offset"] for m in messages] == list(range(len(EXPECTED)))
    assert {m["tstype"] for m in messages} == {"create"}
    # librdkafka sends a batch uncompressed when compressing would not make it smaller (a
    # lone short message), so plain entries may sit next to the compressed ones.
    stored = stored_codecs(topic)
    assert codec in stored and stored <= {codec, "none"}


def test_zstd_round_trips(broker, topic, stored_codecs):
    """librdkafka compresses with zstd once the broker offers Fetch v10 (Kafka 2.1)."""
    kcat_produce(broker.bootstrap, topic, LINES, "-z", "zstd")
    assert [(m["key"], m["payload"]) for m in kcat_consume(broker.bootstrap, topic)] == EXPECTED
    stored = stored_codecs(topic)  # plain entries too, as in test_produce_consume_every_codec
    assert "zstd" in stored and stored <= {"zstd", "none"}


def test_log_append_time_topic_shows_the_broker_time(broker, topic):
    # kcat has no admin mode: the topic is made by confluent-kafka's AdminClient.
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})])[topic].result(30)

    before = now_ms()
    kcat_produce(broker.bootstrap, topic, ["k:v"])
    after = now_ms()
    [message] = kcat_consume(broker.bootstrap, topic)
    assert message["tstype"] == "logappend"
    assert before <= message["ts"] <= after


def test_offsets_for_times_earliest_and_latest(broker, topic):
    kcat_produce(broker.bootstrap, topic, [f":m{i}" for i in range(3)])
    time.sleep(0.02)  # the next batch must carry a later producer timestamp than the first
    middle = now_ms()
    kcat_produce(broker.bootstrap, topic, [f":n{i}" for i in range(2)])

    assert [m["payload"] for m in kcat_consume(broker.bootstrap, topic, offset=f"s@{middle}")] == ["n0", "n1"]
    assert [m["offset"] for m in kcat_consume(broker.bootstrap, topic, offset="beginning")] == [0, 1, 2, 3, 4]
    assert kcat_consume(broker.bootstrap, topic, offset="end") == []
    assert [m["payload"] for m in kcat_consume(broker.bootstrap, topic, offset="-1")] == ["n1"]

    query = kcat("-Q", "-b", broker.bootstrap, "-t", f"{topic}:0:{middle}").stdout
    assert f"{topic} [0] offset 3" in query


def test_topic_is_auto_created_on_first_produce(broker, topic):
    listing = kcat("-L", "-b", broker.bootstrap).stdout
    assert f'topic "{topic}"' not in listing
    kcat_produce(broker.bootstrap, topic, [":first"])
    listing = kcat("-L", "-b", broker.bootstrap, "-t", topic).stdout
    assert f'topic "{topic}" with 1 partitions' in listing
    assert "partition 0, leader 0, replicas: 0, isrs: 0" in listing
