"""The controller's requests to one broker (Kafka 0.10.2's ControllerChannelManager: a queue and a
RequestSendThread per live broker).

The controller queues LeaderAndIsr, UpdateMetadata and StopReplica and goes on with its next
event; a :class:`BrokerSender` delivers them to its broker in the order they were queued, each
retried until the broker answers it. Dropping one instead left a broker that was never told it
leads, follows a leader that no longer is, or (a restarted broker whose first UpdateMetadata was
lost) never ready; and awaiting each one made a paused broker hold every controller event for
the request timeout. A sender serves one registration of its broker: when the registration ends
(the broker died, or registered again) the controller closes it, queue and all, and the broker's
next registration gets a fresh one, as the controller then sends it its whole state anyway.
"""

from __future__ import annotations

import logging
import math

import trio

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.errors import ErrorCode
from minikafka.replication.channel import BrokerChannel, ChannelError

logger = logging.getLogger(__name__)

# Between two attempts at a request the broker did not answer (Kafka's RequestSendThread backoff).
RETRY_BACKOFF_S = 0.1


class BrokerSender:
    """Delivers requests over ``channel`` to broker ``broker_id``, in order, from a task in
    ``nursery`` that runs until :meth:`aclose`."""

    def __init__(self, broker_id: int, channel: BrokerChannel, nursery: trio.Nursery) -> None:
        self.broker_id = broker_id
        self._channel = channel
        self._queue, self._requests = trio.open_memory_channel[tuple[ApiKey, int, dict, trio.Event]](math.inf)
        self._scope = trio.CancelScope()
        nursery.start_soon(self._deliver)

    def send(self, api_key: ApiKey, version: int, body: dict) -> trio.Event:
        """Queue a request behind those not yet delivered; the event is set once the broker
        has answered it (never, if the sender is closed first)."""
        answered = trio.Event()
        self._queue.send_nowait((api_key, version, body, answered))
        return answered

    async def _deliver(self) -> None:
        with self._scope:
            async for api_key, version, body, answered in self._requests:
                response = await self._request(api_key, version, body)
                answered.set()
                if response.error_code:
                    logger.warning("controller: broker %d answered %s with %s", self.broker_id, api_key.name,
                                   ErrorCode(response.error_code).name)

    async def _request(self, api_key: ApiKey, version: int, body: dict):
        attempts = 0
        while True:
            try:
                return await self._channel.request(api_key, version, body)
            except ChannelError as exc:
                attempts += 1
                # Once per request: a broker away for a while is retried ten times a second.
                log = logger.warning if attempts == 1 else logger.debug
                log("controller: %s to broker %d failed (attempt %d): %s; retrying", api_key.name,
                    self.broker_id, attempts, exc)
            await trio.sleep(RETRY_BACKOFF_S)

    async def aclose(self) -> None:
        """Stop delivering: what is still queued is dropped."""
        self._scope.cancel()
        self._queue.close()
        await self._channel.aclose()
