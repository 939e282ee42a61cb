"""The cache on disk: manifest (typed sections, schema), shard writer, reader, mapped shards, batch layout and feeds."""
