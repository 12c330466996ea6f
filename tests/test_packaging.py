"""The repository's layout as a user meets it: Alembic from a checkout, and the built wheel.

The wheel is built from the files a fresh clone would hold (tracked, plus new files git does
not ignore), installed into a directory of its own and run from an empty working directory,
so nothing of the checkout can stand in for what the wheel lacks.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory

ROOT = Path(__file__).resolve().parent.parent
MIGRATIONS = ROOT / "migrations"


def revision_chain() -> list[tuple[str | None, str]]:
    """(down revision, revision) from the first migration to head, from the checkout."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    script = ScriptDirectory.from_config(config)
    chain = [
        (str(rev.down_revision) if rev.down_revision else None, rev.revision)
        for rev in script.walk_revisions()
    ]
    return list(reversed(chain))


def clean_env() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("CONTEXTSTORE_") and key != "PYTHONPATH"
    }


@pytest.mark.slow
def test_alembic_upgrade_head_says_what_it_ran(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    alembic = str(Path(sys.executable).with_name("alembic"))
    command = [alembic, "-c", str(ROOT / "alembic.ini"), "-x", f"url={url}", "upgrade", "head"]
    env = {**clean_env(), "PYTHONPATH": str(ROOT)}
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    ran = [line for line in first.stderr.splitlines() if "Running upgrade" in line]
    expected = [f"{down or ''} -> {revision}," for down, revision in revision_chain()]
    assert len(ran) == len(expected)
    for line, step in zip(ran, expected, strict=True):
        assert line.startswith("INFO  [alembic.runtime.migration] Running upgrade ")
        assert step in line, (step, line)

    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "Running upgrade" not in again.stderr  # already at head: nothing to say it ran


def clone_files() -> list[Path]:
    """The files a fresh clone would hold, relative to the repository root.

    Outside a git checkout (an unpacked sdist), every file but caches and environments.
    """
    if not (ROOT / ".git").exists():
        skipped = {".venv", ".git", "__pycache__", ".hypothesis", ".mypy_cache", ".ruff_cache"}
        return [
            path.relative_to(ROOT)
            for path in ROOT.rglob("*")
            if path.is_file()
            and not skipped & set(path.relative_to(ROOT).parts)
            and path.suffix != ".db"
        ]
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [Path(name) for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the wheel, the directory it is installed into) built from a clone of the checkout."""
    base = tmp_path_factory.mktemp("wheel")
    clone, dist, site = base / "clone", base / "dist", base / "site"
    for name in clone_files():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, clone / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    # No build isolation: hatchling (a test dependency) is already here, and nothing is fetched.
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(clone)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dist.glob("contextstore-*.whl")
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    yield wheel, site


def run_installed(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The installed copy first on the path; the dependencies come from this interpreter.
    env = {**clean_env(), "PYTHONPATH": str(site), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_the_wheel_ships_every_migration(installed_wheel: tuple[Path, Path]) -> None:
    wheel, _ = installed_wheel
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        name.removeprefix("contextstore/migrations/versions/")
        for name in names
        if name.startswith("contextstore/migrations/versions/") and name.endswith(".py")
    }
    in_checkout = {path.name for path in (MIGRATIONS / "versions").glob("*.py")}
    assert shipped == in_checkout
    assert "contextstore/migrations/env.py" in names
    assert "contextstore/migrations/script.py.mako" in names
    assert not any(name.startswith("migrations/") for name in names)


@pytest.mark.slow
def test_the_installed_wheel_migrates_an_empty_sqlite_file(
    installed_wheel: tuple[Path, Path], tmp_path: Path
) -> None:
    _, site = installed_wheel
    database = tmp_path / "empty.db"
    database.touch()
    script = (
        "import sys, contextstore\n"
        "from contextstore.backends.sql.database import MIGRATIONS_DIR, current_revision, migrate\n"
        f"url = 'sqlite:///{database}'\n"
        "migrate(url)\n"
        "print(contextstore.__file__)\n"
        "print(MIGRATIONS_DIR)\n"
        "print(current_revision(url))\n"
    )
    result = run_installed(site, tmp_path, "-c", script)
    assert result.returncode == 0, result.stderr
    module, migrations, revision = result.stdout.splitlines()
    assert Path(module).is_relative_to(site)
    assert Path(migrations) == site / "contextstore" / "migrations"
    assert revision == revision_chain()[-1][1]
    with sqlite3.connect(database) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert {"lessons", "lesson_scopes", "lesson_events", "query_metrics"} <= tables


@pytest.mark.slow
def test_the_installed_wheel_runs_the_demo_in_an_empty_directory(
    installed_wheel: tuple[Path, Path], tmp_path: Path
) -> None:
    _, site = installed_wheel
    workdir = tmp_path / "empty"
    workdir.mkdir()
    result = run_installed(site, workdir, "-m", "contextstore", "demo", "--details", "0")
    assert result.returncode == 0, result.stderr
    assert "Durable metrics in SQL" in result.stdout
    assert sorted(path.name for path in workdir.iterdir() if path.suffix == ".db") == [
        "contextstore.db"
    ]
    db = run_installed(site, workdir, "-m", "contextstore", "db", "current")
    assert db.returncode == 0, db.stderr
    head = revision_chain()[-1][1]
    assert db.stdout.strip() == f"{head} (head is {head})"
