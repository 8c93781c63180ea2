"""Closed log segments into PySpark, Secor-style (the only package that imports pyspark).

* ``export.segment_reader`` - segment file -> Arrow record batches (no pyspark)
* ``export.planning``       - data source options -> one slice per segment (no pyspark)
* ``export.datasource``     - ``spark.read.format("minikafka")`` (``register(spark)``)
* ``export.exporter``       - exactly-once export to ``OUT/<topic>/dt=<date>/<gen>_<partition>_<offset>.parquet``
* ``export.progress``       - durable per-partition export progress and the output lock
* ``export.handoff``        - ``minikafka serve --export-to``: queue, retention veto, exporter process
* ``export.replay``         - exported files back into a DataFrame or a broker
* ``export.cli``            - ``minikafka export`` / ``minikafka replay`` (pyspark imported lazily)
* ``export.standalone``     - a throwaway Spark standalone cluster on this machine (tests, benchmarks)
"""
