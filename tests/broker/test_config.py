"""BrokerConfig: properties files, precedence, validation and the derived log defaults."""

from __future__ import annotations

import logging
import socket

import pytest

from minikafka.broker.config import (
    CONFIG_KEYS,
    BrokerConfig,
    ConfigError,
    Listener,
    config_table,
    load_properties_file,
    parse_properties,
)


def test_properties_syntax_follows_java_properties():
    text = (
        "# comment\n"
        "! also a comment\n"
        "\n"
        "num.partitions=3\n"
        "  log.dirs : /a,/b\n"
        "listeners PLAINTEXT://127.0.0.1:9000\n"
        "log.retention.ms = 1000 \\\n"
        "    \n"
        "key\\=with\\:escapes=v\\u0041\n"
        "empty\n"
    )
    assert parse_properties(text) == {
        "num.partitions": "3",
        "log.dirs": "/a,/b",
        "listeners": "PLAINTEXT://127.0.0.1:9000",
        "log.retention.ms": "1000 ",  # Java keeps trailing blanks; typed values ignore them
        "key=with:escapes": "vA",
        "empty": "",
    }
    assert BrokerConfig({"log.retention.ms": "1000 "}).log_config().retention_ms == 1000


@pytest.mark.parametrize("text", ["bad=\\u12G4\n", "bad=\\u00\n"])
def test_a_malformed_unicode_escape_is_a_config_error(text):
    # java.util.Properties throws "Malformed \\uxxxx encoding"; reading it as "u12G4"
    # would start the broker with a value nobody wrote.
    with pytest.raises(ConfigError, match=r"server.properties: Invalid \\u escape"):
        parse_properties(text, source="server.properties")


def test_a_continued_line_ending_in_an_escaped_backslash_ends_there():
    assert parse_properties("a=x\\\\\nb=y\n") == {"a": "x\\", "b": "y"}
    assert parse_properties("a=x\\\\\\\n  y\n") == {"a": "x\\y"}


def test_defaults():
    config = BrokerConfig()
    assert config.listener == Listener("127.0.0.1", 9092)
    assert config.num_partitions == 1
    assert config.auto_create_topics is True
    assert config.connections_max_idle_ms == 600000
    assert config.log_dirs[0].name == "minikafka-data"
    log = config.log_config()
    assert log.retention_ms == 168 * 3600 * 1000
    assert log.segment_bytes == 1 << 30
    assert log.max_message_bytes == config.message_max_bytes == 1048588


def test_file_then_overrides_then_flags(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=2\nlisteners=PLAINTEXT://0.0.0.0:9093\nlog.dirs=/from/file\n")
    config = BrokerConfig.from_sources(config_file=path, overrides={"num.partitions": "4"},
                                       port=0, log_dir=tmp_path / "flag")
    assert config.num_partitions == 4
    assert config.listener == Listener("0.0.0.0", 0)
    assert config.log_dirs == [(tmp_path / "flag").absolute()]
    config = BrokerConfig.from_sources(config_file=path, host="127.0.0.2")
    assert config.listener == Listener("127.0.0.2", 9093)


def test_retention_and_roll_precedence():
    assert BrokerConfig({"log.retention.hours": "1"}).log_config().retention_ms == 3_600_000
    assert BrokerConfig({"log.retention.hours": "1", "log.retention.minutes": "2"}).log_config().retention_ms == 120_000
    assert BrokerConfig({"log.retention.minutes": "2", "log.retention.ms": "5"}).log_config().retention_ms == 5
    assert BrokerConfig({"log.retention.ms": "-1"}).log_config().retention_ms == -1
    assert BrokerConfig({"log.roll.hours": "2"}).log_config().segment_ms == 7_200_000
    assert BrokerConfig({"log.roll.hours": "2", "log.roll.ms": "10"}).log_config().segment_ms == 10
    assert BrokerConfig({"log.roll.ms": "10"}).log_config().segment_ms == 10


def test_flush_settings_reach_the_log_config():
    default = BrokerConfig({}).log_config()
    assert (default.flush_interval_messages, default.flush_interval_ms) == (None, None)  # the page cache
    config = BrokerConfig({"log.flush.interval.messages": "10", "log.flush.interval.ms": "1000"}).log_config()
    assert (config.flush_interval_messages, config.flush_interval_ms) == (10, 1000)


def test_log_dir_fallback_and_list(tmp_path):
    assert BrokerConfig({"log.dir": str(tmp_path / "x")}).log_dirs == [tmp_path / "x"]
    config = BrokerConfig({"log.dir": "/ignored", "log.dirs": f"{tmp_path}/a, {tmp_path}/b"})
    assert config.log_dirs == [tmp_path / "a", tmp_path / "b"]


@pytest.mark.parametrize("properties, message", [
    ({"no.such.key": "1"}, "unknown config key 'no.such.key'"),
    ({"num.partitions": "many"}, "num.partitions: 'many' is not an integer"),
    ({"num.partitions": "0"}, "num.partitions: 0 is below the minimum 1"),
    ({"message.max.bytes": str(2**31)}, "message.max.bytes: 2147483648 is out of range"),
    ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable: 'yes' is not true or false"),
    ({"log.message.timestamp.type": "Now"}, "log.message.timestamp.type: 'Now' is not one of CreateTime, LogAppendTime"),
    ({"listeners": "SSL://host:9093"}, "ssl.keystore.location: listener SSL uses TLS and needs a PEM key"),
    ({"listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"}, "listeners: listener PLAINTEXT is listed twice"),
    ({"listeners": "localhost"}, "listeners: 'localhost' is not NAME://HOST:PORT"),
    ({"listeners": "INTERNAL://a:1"}, "listeners: listener INTERNAL is not in listener.security.protocol.map"),
    ({"listener.security.protocol.map": "A:TLS"}, "listener.security.protocol.map: 'A:TLS' is not NAME:PROTOCOL"),
    ({"listeners": "SASL_PLAINTEXT://a:1", "sasl.enabled.mechanisms": "GSSAPI"},
     "sasl.enabled.mechanisms: GSSAPI is not supported"),
    ({"listener.name.ssl.ssl.client.auth": "required"}, "listener.name.ssl: no listener named SSL"),
    ({"listener.name.plaintext.log.dirs": "/x"}, "listener.name.plaintext.log.dirs: not a per-listener security setting"),
    ({"zookeeper.connect": "zk:2181", "inter.broker.listener.name": "REPLICATION"},
     "inter.broker.listener.name: no listener named REPLICATION"),
    ({"zookeeper.connect": "zk:2181", "listeners": "SASL_PLAINTEXT://:0",
      "security.inter.broker.protocol": "SASL_PLAINTEXT"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config: the broker's own username and password"),
    ({"zookeeper.connect": "zk:2181", "listeners": "SASL_PLAINTEXT://:0",
      "security.inter.broker.protocol": "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
      "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
          'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker";'},
     "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config: give username"),
    ({"zookeeper.connect": "zk:2181", "listeners": "SASL_PLAINTEXT://:0",
      "security.inter.broker.protocol": "SASL_PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
      "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
     "sasl.mechanism.inter.broker.protocol: SCRAM-SHA-512 is not among listener SASL_PLAINTEXT's"),
    ({"zookeeper.connect": "zk:2181", "listeners": "SSL://:0", "security.inter.broker.protocol": "SSL",
      "ssl.keystore.location": "/nonexistent.pem"}, "inter-broker TLS on listener SSL"),
    ({"advertised.listeners": "PLAINTEXT://:9092"}, "advertised.listeners: a host is required"),
    ({"minikafka.export.master": "local[2]"}, "minikafka.export.master: set without minikafka.export.dir"),
])
def test_bad_values_are_one_readable_sentence(properties, message):
    with pytest.raises(ConfigError) as info:
        BrokerConfig(properties)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_group_coordinator_keys_are_typed_and_misspelt_ones_refused():
    config = BrokerConfig({"offsets.retention.minutes": "5", "group.initial.rebalance.delay.ms": "0"})
    assert config.get("offsets.retention.minutes") == 5
    assert config.is_set("group.initial.rebalance.delay.ms") and config.get("group.initial.rebalance.delay.ms") == 0
    assert not config.is_set("group.max.session.timeout.ms")
    assert config.get("offsets.missing", 50) == 50
    # Group keys are in the table like every other key: a typo is not silently ignored.
    with pytest.raises(ConfigError, match="did you mean 'group.max.session.timeout.ms'"):
        BrokerConfig({"group.max.session.timout.ms": "60000"})
    # Kafka's group settings that mean nothing here are ignored, like the other Kafka-only keys.
    assert not BrokerConfig({"group.max.size": "10"}).is_set("group.max.size")
    with pytest.raises(ConfigError, match="offsets.retention.minutes"):
        BrokerConfig({"offsets.retention.minutes": "0"})


def test_advertised_address():
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0"})
    assert config.advertised_address(45678) == ("127.0.0.1", 45678)
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0",
                           "advertised.listeners": "PLAINTEXT://kafka.example:19092"})
    assert config.advertised_address(45678) == ("kafka.example", 19092)
    config = BrokerConfig({"listeners": "PLAINTEXT://0.0.0.0:9092"})
    assert config.advertised_address(9092) == (socket.getfqdn(), 9092)
    config = BrokerConfig({"listeners": "PLAINTEXT://[::1]:0"})
    assert config.listener == Listener("::1", 0)
    assert str(config.listener) == "PLAINTEXT://[::1]:0"


def test_several_listeners_with_names_mapped_to_protocols():
    config = BrokerConfig({
        "listeners": "PLAINTEXT://127.0.0.1:0,CLIENTS://:9094,REPLICATION://10.0.0.1:9095",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENTS:SASL_SSL,REPLICATION:SSL",
        "advertised.listeners": "CLIENTS://kafka.example:19094",
        "inter.broker.listener.name": "REPLICATION",
        "ssl.keystore.location": "/etc/broker.pem",
        "listener.name.replication.ssl.client.auth": "required",
        "listener.name.clients.plain.sasl.jaas.config": "x",
    })
    plain, clients, replication = config.listeners
    assert config.listener == plain == Listener("127.0.0.1", 0)
    assert clients == Listener(None, 9094, "CLIENTS", "SASL_SSL") and clients.uses_tls and clients.uses_sasl
    assert replication.security_protocol == "SSL" and not replication.uses_sasl
    assert config.inter_broker_listener() == replication
    assert config.advertised_address(41000, clients) == ("kafka.example", 19094)
    assert config.advertised_address(41000, plain) == ("127.0.0.1", 41000)
    # Per-listener settings win over the broker-wide ones, which are the fallback.
    assert config.listener_setting(replication, "ssl.client.auth") == "required"
    assert config.listener_setting(clients, "ssl.client.auth") == "none"
    assert config.listener_setting(clients, "sasl.jaas.config", "PLAIN") == "x"
    assert config.listener_setting(clients, "sasl.jaas.config", "SCRAM-SHA-256") is None
    # --host/--port change the first listener and keep the others.
    flagged = BrokerConfig.from_sources(overrides={"listeners": "SSL://:9093,PLAINTEXT://:9092",
                                                   "ssl.keystore.location": "/k.pem"}, port=0)
    assert [str(listener) for listener in flagged.listeners] == ["SSL://:0", "PLAINTEXT://:9092"]


def test_every_key_has_a_description_and_a_valid_default():
    rows = config_table()
    assert [row["name"] for row in rows] == [key.name for key in CONFIG_KEYS]
    for key in CONFIG_KEYS:
        assert key.description.strip()
        if key.default is not None:
            text = str(key.default).lower() if isinstance(key.default, bool) else str(key.default)
            BrokerConfig({key.name: text})


def test_a_server_properties_written_for_kafka_is_accepted(tmp_path, caplog):
    """Kafka's stock config/server.properties carries thread counts and socket buffers: those
    have no meaning here and are ignored; the rest applies, its ZooKeeper address included
    (the broker joins that cluster)."""
    stock = tmp_path / "server.properties"
    stock.write_text(
        "broker.id=0\nnum.network.threads=3\nnum.io.threads=8\nsocket.send.buffer.bytes=102400\n"
        "socket.receive.buffer.bytes=102400\nsocket.request.max.bytes=104857600\n"
        f"log.dirs={tmp_path}/kafka-logs\nnum.partitions=3\nnum.recovery.threads.per.data.dir=1\n"
        "offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n"
        "transaction.state.log.min.isr=1\nlog.retention.hours=168\nlog.segment.bytes=1073741824\n"
        "log.retention.check.interval.ms=300000\nzookeeper.connect=localhost:2181\n"
        "zookeeper.connection.timeout.ms=18000\ngroup.initial.rebalance.delay.ms=0\n")
    with caplog.at_level(logging.WARNING, logger="minikafka.broker.config"):
        config = BrokerConfig(load_properties_file(stock))
    assert config.num_partitions == 3
    assert config.log_dirs == [tmp_path / "kafka-logs"]
    assert config.zookeeper_connect == "localhost:2181"
    assert config.get("zookeeper.connection.timeout.ms") == 18000
    warned = {record.args[0] for record in caplog.records}
    assert warned == {"num.network.threads", "num.io.threads", "socket.send.buffer.bytes",
                      "socket.receive.buffer.bytes", "num.recovery.threads.per.data.dir"}
    # The transaction coordinator's own keys are read, not warned about.
    assert config.get("transaction.state.log.replication.factor") == 1


def test_a_misspelt_key_is_refused_with_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'log.retention.ms'"):
        BrokerConfig({"log.retension.ms": "5"})


def test_test_broker_dial_maps_broker_ids_to_proxy_addresses():
    from minikafka.broker.config import BrokerConfig, parse_broker_dial

    assert parse_broker_dial("") == {}
    assert parse_broker_dial("2=127.0.0.1:40001, 3=[::1]:40002") == {2: ("127.0.0.1", 40001), 3: ("::1", 40002)}
    config = BrokerConfig({"minikafka.test.broker.dial": "2=127.0.0.1:40001"})
    assert config.test_broker_dial == {2: ("127.0.0.1", 40001)}
    assert BrokerConfig({}).test_broker_dial == {}
    for bad in ("2", "x=h:1", "2=h", "2=h:0", "2=h:99999", "2=:1"):
        with pytest.raises(ConfigError, match="minikafka.test.broker.dial"):
            parse_broker_dial(bad)
