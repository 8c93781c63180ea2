"""How this broker secures its own connections to the other brokers' inter-broker listener
(``inter.broker.listener.name``): the controller's requests, the replica fetchers and the
controlled shutdown all use the one :class:`~minikafka.replication.channel.ChannelSecurity`
built here.

- TLS (SSL, SASL_SSL): ``tls.client_context``, which applies Kafka's
  ``ssl.endpoint.identification.algorithm``.
- SASL (SASL_PLAINTEXT, SASL_SSL): the mechanism ``sasl.mechanism.inter.broker.protocol``,
  with the broker's own ``username``/``password`` from the listener's JAAS entry for it
  (``listener.name.<l>.<mech>.sasl.jaas.config``, as in Kafka, where the same entry also lists
  PLAIN's ``user_<name>`` accounts).
"""

from __future__ import annotations

import functools

from minikafka.broker.config import BrokerConfig, ConfigError, Listener
from minikafka.broker.security import tls
from minikafka.broker.security.sasl import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, JaasError, parse_jaas
from minikafka.broker.security.sasl_client import client_mechanism
from minikafka.replication.channel import ChannelSecurity


def channel_security(config: BrokerConfig) -> ChannelSecurity:
    """The security of this broker's inter-broker connections; a ConfigError names the
    setting that is missing or wrong."""
    listener = config.inter_broker_listener()
    context = None
    if listener.uses_tls:
        context = tls.client_context(config, listener)  # applies endpoint identification
    sasl = None
    if listener.uses_sasl:
        mechanism, user, password = _sasl_credentials(config, listener)
        sasl = functools.partial(client_mechanism, mechanism, user, password)
    return ChannelSecurity(ssl_context=context, sasl=sasl)


def _sasl_credentials(config: BrokerConfig, listener: Listener) -> tuple[str, str, str]:
    mechanism = config.get("sasl.mechanism.inter.broker.protocol")
    enabled = config.listener_setting(listener, "sasl.enabled.mechanisms")
    if mechanism not in enabled:
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol: {mechanism} is not among listener "
                          f"{listener.name}'s sasl.enabled.mechanisms ({', '.join(enabled)})")
    setting = f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    jaas = config.listener_setting(listener, "sasl.jaas.config", mechanism)
    if not jaas:
        raise ConfigError(f"{setting}: the broker's own username and password for inter-broker "
                          f"{mechanism} are missing")
    try:
        module, options = parse_jaas(jaas)
    except JaasError as exc:
        raise ConfigError(f"{setting}: {exc}") from None
    wanted = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    if module != wanted:
        raise ConfigError(f"{setting}: {mechanism} needs {wanted}, got {module}")
    if not options.get("username") or "password" not in options:
        raise ConfigError(f"{setting}: give username=\"...\" password=\"...\" (the broker's own "
                          "credentials for inter-broker connections)")
    return mechanism, options["username"], options["password"]
