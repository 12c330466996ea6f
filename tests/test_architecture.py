"""The package's layers, enforced: imports only go down (see docs/design/architecture.md).

interfaces → store → engine → backends → core; ``errors`` and ``config`` are leaves that any
layer may import. Every import counts, a function's deferred imports included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests import REPO_ROOT

PACKAGE = REPO_ROOT / "contextstore"
LEAVES = ("contextstore.errors", "contextstore.config")
# The backends an engine may know: the interfaces, and the in-process implementations that
# are an engine's defaults when no store wires it. Redis and SQL reach an engine only as
# ports and parts a store hands it.
BACKEND_INTERFACES = (
    "contextstore.backends.cache",
    "contextstore.backends.windows",
    "contextstore.backends.memory",
)
# What each part may import from contextstore, besides itself and the leaves.
ALLOWED: dict[str, tuple[str, ...]] = {
    "contextstore.core": (),
    "contextstore.backends": ("contextstore.core",),
    "contextstore.engine": ("contextstore.core", *BACKEND_INTERFACES),
    "contextstore.store": ("contextstore.core", "contextstore.backends", "contextstore.engine"),
    "contextstore.sample_data": ("contextstore.core",),
    "contextstore.errors": (),
    "contextstore.config": (),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = REPO_ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported(path: Path) -> set[str]:
    """The contextstore modules ``path`` imports, absolute or relative, deferred ones too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            submodules = {f"{target}.{alias.name}" for alias in node.names}
            names.update({name for name in submodules if is_module(name)} or {target})
    return {name for name in names if name == "contextstore" or name.startswith("contextstore.")}


def part_of(module: str) -> str | None:
    for part in ALLOWED:
        if module == part or module.startswith(part + "."):
            return part
    return None


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def within(name: str, parts: tuple[str, ...]) -> bool:
    return any(name == part or name.startswith(part + ".") for part in parts)


@pytest.mark.parametrize("path", modules(), ids=module_name)
def test_imports_only_go_down(path: Path) -> None:
    part = part_of(module_name(path))
    if part is None:  # the interfaces and the package root sit on top
        return
    allowed = (part, *LEAVES, *ALLOWED[part])
    wrong = sorted(name for name in imported(path) if not within(name, allowed))
    assert wrong == [], f"{module_name(path)} imports {wrong}"


PUBLIC_INTEGRATIONS = "contextstore.integrations"


def test_every_module_belongs_to_a_part() -> None:
    top = ("contextstore", "contextstore.__main__", PUBLIC_INTEGRATIONS)
    loose = [
        module_name(path)
        for path in modules()
        if part_of(module_name(path)) is None
        and not within(module_name(path), ("contextstore.interfaces", *top))
    ]
    assert loose == []


def test_the_rules_catch_an_upward_import() -> None:
    """The checker itself: a core module importing the engine or the root is caught."""
    assert within("contextstore.engine.sync", ALLOWED["contextstore.store"])
    assert not within("contextstore.engine.sync", ("contextstore.core", *LEAVES))
    assert not within("contextstore", ("contextstore.core", *LEAVES))
    assert imported(PACKAGE / "core" / "guard.py") >= {"contextstore.core.analysis"}


INTERFACES = "contextstore.interfaces"
# The HTTP service and the web console share their web pieces (settings, stores, request
# layers) from one package; neither imports the other, and the shared package imports
# neither. Only the server that runs both (``interfaces.server``) knows them both.
APART = {
    f"{INTERFACES}.service": (f"{INTERFACES}.console",),
    f"{INTERFACES}.console": (f"{INTERFACES}.service",),
    f"{INTERFACES}.web": (f"{INTERFACES}.service", f"{INTERFACES}.console", f"{INTERFACES}.server"),
}


@pytest.mark.parametrize("part", sorted(APART))
def test_the_service_and_the_console_share_web_pieces_not_each_other(part: str) -> None:
    paths = sorted((PACKAGE / part.split(".", 1)[1].replace(".", "/")).rglob("*.py"))
    assert paths
    wrong = sorted(
        f"{module_name(path)} imports {name}"
        for path in paths
        for name in imported(path)
        if within(name, APART[part])
    )
    assert wrong == []
    web = {
        name for path in paths for name in imported(path) if within(name, (f"{INTERFACES}.web",))
    }
    assert part.endswith(".web") or web  # each side does import the shared pieces


def test_the_engine_rule_refuses_the_redis_and_sql_modules() -> None:
    """The checker itself: the engine's rule refuses the speed-ups' modules."""
    refused = ("contextstore.backends.redis.phases", "contextstore.backends.sql.run_reads")
    assert not any(within(name, ALLOWED["contextstore.engine"]) for name in refused)
    assert within("contextstore.backends.windows", ALLOWED["contextstore.engine"])


def test_the_public_integrations_only_re_export_the_interfaces_adapters() -> None:
    """``contextstore.integrations.X`` is the import path of the adapter in
    ``contextstore.interfaces.integrations.X``: it imports that module only (no logic of
    its own), and nothing in the package imports it back."""
    paths = sorted((PACKAGE / "integrations").glob("*.py"))
    assert [path.name for path in paths][:1] == ["__init__.py"] and len(paths) >= 3
    for path in paths:
        name = module_name(path)
        expected = (
            set() if path.name == "__init__.py" else {f"{INTERFACES}.integrations.{path.stem}"}
        )
        assert imported(path) == expected, name
    users = sorted(
        module_name(path)
        for path in modules()
        if not within(module_name(path), (PUBLIC_INTEGRATIONS,))
        and any(within(name, (PUBLIC_INTEGRATIONS,)) for name in imported(path))
    )
    assert users == []
