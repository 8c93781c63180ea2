"""Replication's decisions as plain functions and classes: no sockets, no ZooKeeper, no sleeps.

``assignment`` places new partitions' replicas on brokers, ``election`` picks leaders and ISRs
for the controller, ``partition_state`` is a leader's ISR and high watermark bookkeeping, and
``truncation`` tells a follower where to cut its log by leader epoch. The trio and kazoo
layer around them performs what they decide.
"""
