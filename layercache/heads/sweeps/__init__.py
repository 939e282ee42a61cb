"""``layercache sweep``: many heads trained from one cache inside a time budget, their candidates, the budget,
the ranking (with a paired bootstrap for grid variants) and the leaderboard records in ``sweep.json``."""
