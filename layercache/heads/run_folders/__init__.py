"""Run folders on disk: claimed, locked and committed whole; their files written and read back with checks, read
as typed sections, and the identity of the cache a run was trained on."""
