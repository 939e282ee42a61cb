"""How a head is scored: the metrics, evaluation passes over a feed, the selection metric per task that chooses the
epoch, and the paired bootstrap that compares two heads on the same rows."""
