"""Listener security: TLS contexts and certificate principals (``tls``), SASL mechanisms and
Kafka's JAAS syntax (``sasl``), SCRAM credentials and their store (``scram``).

Principals are Kafka's strings: ``User:ANONYMOUS`` on PLAINTEXT (and TLS without a client
certificate), ``User:<name>`` after SASL, ``User:<subject DN>`` under mutual TLS.

The broker imports only this module until a listener needs TLS or SASL or an authorizer is
configured: the submodules load on first use.
"""

ANONYMOUS = "User:ANONYMOUS"
# The one resource name of the Cluster resource type (Kafka's Resource.ClusterResourceName).
CLUSTER_NAME = "kafka-cluster"
