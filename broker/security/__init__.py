"""Listener security: TLS contexts and certificate principals (``tls``), SASL mechanisms and
Kafka's JAAS syntax (``sasl``), SCRAM credentials and their store (``scram``).

Principals are Kafka's strings: ``User:ANONYMOUS`` on PLAINTEXT (and TLS without a client
certificate), ``User:<name>`` after SASL, ``User:<subject DN>`` under mutual TLS.
"""

ANONYMOUS = "User:ANONYMOUS"
