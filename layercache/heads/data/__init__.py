"""What a head reads from a cache: the source (token states or pooled vectors), the check that the states are
finite, and the seeded validation slice of a training split."""
