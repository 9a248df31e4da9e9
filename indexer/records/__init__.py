"""The Kafka record format: v2 batches, legacy v0/v1 message sets, codecs, `.log` files."""
