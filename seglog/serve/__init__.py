"""``seglog serve``: a read-only Kafka protocol endpoint over a seglog (or broker-written) log directory.

Modules, one concept each:

- :mod:`seglog.serve.protocol`: request/response framing, the API table and its versions, error codes
  (message schemas are kafka-python's, generated from Apache Kafka's own JSON definitions);
- :mod:`seglog.serve.catalog`: the partitions of the log directory, opened read-only and re-opened
  when the writer commits (its ``replication-offset-checkpoint``), rolls or retention changes them;
- :mod:`seglog.serve.fetch`: Fetch (long-poll, read_committed) and ListOffsets;
- :mod:`seglog.serve.groups`: the group coordinator (generations, rebalances, session timeouts);
- :mod:`seglog.serve.group_offsets`: committed group offsets, stored durably in the log directory;
- :mod:`seglog.serve.live_groups`: the groups with members, published for ``seglog groups``;
- :mod:`seglog.serve.server`: the asyncio server, connections and the dispatch of requests.
"""
