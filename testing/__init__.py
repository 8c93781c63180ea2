"""What minikafka offers other projects' tests beyond the pytest fixtures
(``minikafka.broker.pytest_plugin``): :mod:`minikafka.testing.warm` forks fixture brokers from a
pre-imported parent, for any test runner."""
