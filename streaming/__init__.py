"""The Spark side of seglog: the foreachBatch sink, the main job, readers."""
