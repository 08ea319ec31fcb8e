"""Record storage: Arrow schemas, streaming readers, shard metadata, crash-safe shard parts, atomic
files."""
