"""seglog's storage engine: Kafka-format segment logs with offset and time indexes."""
