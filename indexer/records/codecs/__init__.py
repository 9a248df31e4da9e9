"""Compression codecs of Kafka record batches."""
