"""The transaction coordinator (KIP-98): transactional ids, their producer ids and epochs, and
the two-phase end of each transaction, kept in ``__transaction_state``.

* :mod:`broker.transactions.state`: one id's state machine and its event in the log;
* :mod:`broker.transactions.coordinator`: the requests (InitProducerId with a transactional
  id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn), persistence, markers and timeouts;
* :mod:`broker.transactions.markers`: writing COMMIT/ABORT markers to partitions this broker
  leads, shared by the WriteTxnMarkers handler and the coordinator's local path.
"""
