"""What the HTTP service and the web console share: settings, the stores, the request layers.

``settings`` (``ServiceSettings``), ``backends`` (one async store per namespace),
``middleware`` (access log, key check, deadline, body limit), ``errors`` (the error body the
layers answer with) and ``telemetry`` (Prometheus counters). The service and the console
import these; neither imports the other, and nothing here imports either.
"""
