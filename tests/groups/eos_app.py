"""An exactly-once consume-transform-produce application (confluent-kafka) as a process of its
own, so tests can kill -9 it anywhere:

    python eos_app.py BOOTSTRAP [PAUSE_S]

It consumes ``in`` in group ``eos`` (a static member: a restarted instance takes its place at
once) and, per batch, in one transaction writes every value with ``!`` appended to ``out`` and
commits the batch's offsets (``send_offsets_to_transaction``), pausing ``PAUSE_S`` with the
transaction open (so that a test's kills find one open, and the inputs last a few kills). Any
error ends the process with status 1: the tests start it again, as a supervisor would.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer

TIMEOUT_S = 30
# Small transactions: many of them, so the tests' kills find one open.
BATCH = 20


def main(bootstrap: str, pause_s: float = 0.0) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos", "group.instance.id": "eos-app",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "session.timeout.ms": 10000})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eos-app", "linger.ms": 5})
    producer.init_transactions(TIMEOUT_S)
    consumer.subscribe(["in"])
    while True:
        messages = consumer.consume(BATCH, timeout=0.5)
        if not messages:
            continue
        producer.begin_transaction()
        for message in messages:
            if message.error():
                raise RuntimeError(message.error())
            producer.produce("out", message.value() + b"!", key=message.key())
        time.sleep(pause_s)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)


if __name__ == "__main__":
    main(sys.argv[1], *map(float, sys.argv[2:3]))
