"""Command lines as the older CLI tests were written: before metrics commands covered their
own namespace only."""

from __future__ import annotations


def every_namespace(args: tuple[str, ...], env: dict[str, str] | None = None) -> list[str]:
    """``args`` over every namespace, as these tests were written: a metrics command covers
    its own namespace (``default``) unless it names one or is told ``--all-namespaces``."""
    metrics = args[:2] in (("metrics", "report"), ("metrics", "prune"), ("lessons", "stats"))
    named = {"--namespace", "--all-namespaces"} & set(args) or "CONTEXTSTORE_NAMESPACE" in (
        env or {}
    )
    return [*args, "--all-namespaces"] if metrics and not named else list(args)
