"""Apache Kafka: ``KafkaSource`` (PyFlink's names) and a real single-node broker for development
and tests (``KafkaBroker``, ``streamjob kafka-dev``)."""
