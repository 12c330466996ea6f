"""The OpenTelemetry SDK with an in-memory exporter, for the tests that read spans back.

The process has one tracer provider; the first test that needs spans installs the SDK's,
with an exporter that keeps every finished span in memory, and each test starts from an
empty exporter (the ``spans`` fixture).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@functools.cache
def exporter() -> InMemorySpanExporter:
    memory = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return memory


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    """The spans whose parent is ``parent``, in the order they started."""
    assert parent.context is not None
    found = [
        span
        for span in spans
        if span.parent is not None and span.parent.span_id == parent.context.span_id
    ]
    return sorted(found, key=lambda span: span.start_time or 0)


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return sorted(
        (span for span in spans if span.name == name), key=lambda span: span.start_time or 0
    )
