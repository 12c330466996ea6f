"""contextstore benchmarks: every figure is a ratio against a baseline measured in the same run.

Run ``python -m benchmarks`` (about four minutes on two cores; ``--quick`` for a smaller
version, ``--sections a,b`` for a selection, ``--list`` to see the sections). Results go to
``benchmarks/results/latest.md`` and ``latest.json`` (or ``--out DIR``).

Why ratios: absolute numbers depend on the machine and on whatever else it is doing; a ratio
against a baseline timed in the same process, interleaved round by round with the measured
code, cancels most of that. Timings use ``time.perf_counter_ns``, warm-ups, several rounds and
medians; the garbage collector is paused inside each timed batch (as ``timeit`` does).

PostgreSQL and Redis sections use a scratch database (created from ``--postgres-url``, dropped
at the end) and their own Redis namespaces (their keys deleted at the end); a service that
cannot be reached is reported in one line and its sections are skipped.
"""
