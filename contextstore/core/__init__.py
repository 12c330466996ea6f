"""The pure domain: matching, budgets, analysis, ranking, composition, the guard.

No I/O, no clock, no storage: imports nothing from contextstore but ``errors`` and ``config``.
"""
