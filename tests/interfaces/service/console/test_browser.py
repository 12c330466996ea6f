"""The console in a real headless Chromium: sign in, read the overview, find a lesson, read its
history, retire it, and see the change from the command line.

The browser is Debian's ``chromium`` driven through Debian's ``chromium-driver``, both named
by path: Selenium never looks for, downloads or reports anything (``SE_OFFLINE``,
``SE_AVOID_STATS``), and Chromium runs with its background networking, updates and sync
off, in a fresh profile. JavaScript is switched off in that profile: every step here works
without it, as the console promises. A screenshot of each page is saved under
``artifacts/console/`` (or ``$CONTEXTSTORE_CONSOLE_ARTIFACTS``), which CI keeps; each page is
also drawn at 1,280 and 390 px and checked for chart labels drawn over each other and for
anything wider than the window.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contextstore.core.lessons import LessonRecord
from contextstore.core.metrics import RunTrace
from contextstore.store.sync import connect
from tests import REPO_ROOT
from tests.factories import make_metric
from tests.interfaces.service.console.layout import hidden_boxes, overflow, overlapping_labels
from tests.interfaces.service.server import Server

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(
    os.environ.get(
        "CONTEXTSTORE_CONSOLE_ARTIFACTS",
        REPO_ROOT / "artifacts" / "console",
    )
)
NAMESPACE = "fleet"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--metrics-recording-only",
    "--disable-dev-shm-usage",
    "--window-size=1366,900",
)


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("console-browser")
    instance = Server(directory, f"sqlite:///{directory / 'store.db'}")
    instance.start()
    try:
        yield instance
    finally:
        assert instance.stop() == 0, instance.log.read_text()


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        # A skip; CI, which installs both, turns any skip into a failure.
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install …)")
    os.environ["SE_OFFLINE"] = "true"
    os.environ["SE_AVOID_STATS"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tmp_path_factory.mktemp("chromium-profile")
    options.add_argument(f"--user-data-dir={profile}")
    options.add_experimental_option(
        "prefs", {"profile.managed_default_content_settings.javascript": 2}
    )
    service = Service(executable_path=str(CHROMEDRIVER), log_output=subprocess.DEVNULL)
    chrome = webdriver.Chrome(service=service, options=options)
    chrome.set_page_load_timeout(30)
    try:
        yield chrome
    finally:
        chrome.quit()
        shutil.rmtree(profile, ignore_errors=True)


def shoot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def follow(driver: Any, element: Any) -> None:
    """Click a link or a submit button and wait until the next page has replaced this one."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    element.click()

    def replaced(_: Any) -> bool:
        try:
            page.tag_name  # noqa: B018 - any call on a node of the old document fails
        except WebDriverException:  # stale, or "does not belong to the document"
            return True
        return False

    WebDriverWait(driver, 30).until(replaced)


def cli(database_url: str, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "contextstore", *args, "--json", "--database-url", database_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("CONTEXTSTORE_")},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_an_administrator_reviews_the_fleet_and_retires_a_lesson(
    console_server: Server, driver: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    url = console_server.database_url
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=20)
    runs = [
        make_metric(
            start + timedelta(minutes=23 * i),
            namespace=NAMESPACE,
            worker=f"agent-{i % 4}",
            complexity=("low", "medium", "high")[i % 3],
            response_ms=float(20 + (i * 53) % 211) + 0.5,
            cache_hit=i % 4 == 0,
            guard_passed=i % 7 != 3,
            lessons_matched=i % 4,
            lessons_included=i % 3 if i % 3 <= i % 4 else 0,
        )
        for i in range(50)
    ]
    target = f"billing.retry-{uuid.uuid4().hex[:6]}"
    with connect(database_url=url, redis_url="", namespace="elsewhere") as elsewhere:
        elsewhere.metrics.record(make_metric(start, namespace="elsewhere", response_ms=9999.0))
    with connect(database_url=url, redis_url="", namespace=NAMESPACE) as store:
        store.metrics.record_many(runs)
        store.lessons.add(
            LessonRecord(
                entity_id=target,
                injection_form="Retry billing calls with exponential <backoff>.",
                summary="Back off on billing 429s",
                severity="warning",
                status="active",
                applies_to=("tag:billing",),
            )
        )
        store.lessons.add(
            LessonRecord(
                entity_id="search.cache", injection_form="Cache searches.", status="active",
                applies_to=("tag:search",),
            )
        )  # fmt: skip
    # An owner key: the console changes lessons for owners only.
    owner_key = console_server.key(NAMESPACE, "owner")
    base = console_server.url

    # Sign in: an anonymous visit lands on the sign-in form.
    driver.get(base + "/")
    assert driver.current_url == base + "/console/signin"
    shoot(driver, "01-signin")
    driver.find_element(By.ID, "key").send_keys(owner_key)
    follow(driver, driver.find_element(By.CSS_SELECTOR, "form.card button[type=submit]"))
    assert driver.current_url == base + "/console/"
    cookie = driver.get_cookie("contextstore_console")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"

    # The overview over everything: its figures are the command line's report.
    Select(driver.find_element(By.ID, "range")).select_by_value("all")
    follow(driver, driver.find_element(By.CSS_SELECTOR, "form.filters button"))
    assert driver.current_url == base + "/console/?range=all&since=&until=&by=complexity"
    assert len(driver.find_elements(By.CSS_SELECTOR, "svg.chart")) == 4
    shoot(driver, "02-overview")
    report = cli(url, "metrics", "report", "--namespace", NAMESPACE)
    assert report["runs"] == 50
    found = driver.find_elements(By.CSS_SELECTOR, ".tile")
    tiles = {tile.get_attribute("data-figure"): tile for tile in found}
    assert int(tiles["runs"].get_attribute("data-value")) == report["runs"]
    for name in ("p50_ms", "p95_ms", "p99_ms", "cache_hit_rate", "guard_failure_rate"):
        assert float(tiles[name].get_attribute("data-value")) == report[name], name
    assert tiles["p50_ms"].find_element(By.CLASS_NAME, "value").text == f"{report['p50_ms']:.2f}"
    assert (
        tiles["cache_hit_rate"].find_element(By.CLASS_NAME, "value").text
        == f"{report['cache_hit_rate'] * 100:.2f} %"
    )
    for row in report["by_complexity"]:
        cells = driver.find_elements(By.CSS_SELECTOR, f'tr[data-group="{row["complexity"]}"] td')
        assert int(cells[0].text) == row["runs"]

    # The same overview on a phone's width: one column, nothing wider than the screen.
    driver.set_window_size(390, 844)
    driver.refresh()
    body = driver.find_element(By.TAG_NAME, "main")
    assert body.size["width"] <= 390
    shoot(driver, "03-overview-phone")
    driver.set_window_size(1366, 900)

    # Find the lesson, read its history, retire it.
    follow(driver, driver.find_element(By.LINK_TEXT, "Lessons"))
    driver.find_element(By.ID, "q").send_keys("billing 429")
    follow(driver, driver.find_element(By.CSS_SELECTOR, "form.filters button"))
    rows = driver.find_elements(By.CSS_SELECTOR, "#lessons tbody tr")
    assert [row.get_attribute("data-lesson") for row in rows] == [target]
    shoot(driver, "04-lessons-search")
    follow(driver, driver.find_element(By.LINK_TEXT, target))
    assert driver.find_element(By.ID, "lesson-status").text == "active"
    assert driver.find_element(By.ID, "injection-form").text == (
        "Retry billing calls with exponential <backoff>."
    )
    history = driver.find_elements(By.CSS_SELECTOR, "#history tbody tr")
    assert [row.find_elements(By.TAG_NAME, "td")[1].text for row in history] == [
        "insert",
        "scope",
    ]
    shoot(driver, "05-lesson")
    follow(driver, driver.find_element(By.CSS_SELECTOR, "button.danger"))
    assert driver.find_element(By.CSS_SELECTOR, ".notice").text == "Lesson retired."
    assert driver.find_element(By.ID, "lesson-status").text == "retired"
    events = [
        [cell.text for cell in row.find_elements(By.TAG_NAME, "td")[1:5]]
        for row in driver.find_elements(By.CSS_SELECTOR, "#history tbody tr")
    ]
    owner_id = owner_key.split("_")[1]
    assert len(events) == 3
    assert events[0][:3] == ["insert", "", "active"]
    assert events[2] == ["status", "active", "retired", f"console:{owner_id}"]
    shoot(driver, "06-lesson-retired")

    # The command line sees the change.
    shown = cli(url, "lessons", "show", target)
    assert shown["status"] == "retired"
    assert [(e["event"], e["old_status"], e["new_status"]) for e in shown["history"]] == [
        ("insert", None, "active"),
        ("scope", None, None),
        ("status", "active", "retired"),
    ]
    assert shown["history"][2]["actor"] == f"console:{owner_id}"

    # The scope page: the retired lesson is still listed for its tag, as not active.
    driver.get(base + "/console/explain?tags=billing,search")
    ranked = driver.find_elements(By.CSS_SELECTOR, "#explanation tbody tr")
    assert [
        (row.get_attribute("data-lesson"), row.get_attribute("data-outcome")) for row in ranked
    ] == [
        ("search.cache", "included"),
        (target, "not active"),
    ]
    shoot(driver, "07-scope")

    # The namespace's knowledge documents.
    with connect(database_url=url, redis_url="", namespace=NAMESPACE) as store:
        store.knowledge.add("Billing retries back off exponentially.", "docs/billing.md")
    follow(driver, driver.find_element(By.LINK_TEXT, "Documents"))
    listed = driver.find_elements(By.CSS_SELECTOR, "#documents tbody tr")
    assert [row.get_attribute("data-source") for row in listed] == ["docs/billing.md"]
    shoot(driver, "08-documents")

    # Sign out: the session is gone.
    follow(driver, driver.find_element(By.CSS_SELECTOR, "form.signout button"))
    assert driver.current_url == base + "/console/signin"
    driver.get(base + "/console/lessons")
    assert driver.current_url == base + "/console/signin"


WIDTHS = (1280, 390)
LAYOUT_NAMESPACE = "layout"


def check_layout(driver: Any, name: str) -> None:
    """At each width: a screenshot, no chart label over another, nothing wider than the window."""
    for width in WIDTHS:
        driver.set_window_size(width, 900)
        driver.refresh()
        shoot(driver, f"{name}-{width}")
        assert overlapping_labels(driver) == [], (name, width)
        assert overflow(driver) == 0, (name, width)
    driver.set_window_size(1366, 900)


def test_every_page_reads_at_laptop_and_phone_width(console_server: Server, driver: Any) -> None:
    from selenium.webdriver.common.by import By

    url = console_server.database_url
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=30)
    lesson_ids = [f"payments.gateway.retry-policy-number-{i:02d}" for i in range(14)]
    workers = [f"worker-in-the-eastern-region-{i:02d}" for i in range(14)]
    runs = [
        make_metric(
            start + timedelta(minutes=17 * i),
            namespace=LAYOUT_NAMESPACE,
            worker=workers[i % len(workers)],
            complexity=("low", "medium", "high")[i % 3],
            response_ms=float(10 + (i * 37) % 300),
            trace=RunTrace(lessons_included=tuple(sorted({lesson_ids[i % 14], lesson_ids[0]}))),
        )
        for i in range(90)
    ]
    with connect(database_url=url, redis_url="", namespace=LAYOUT_NAMESPACE) as store:
        store.metrics.record_many(runs)
        for index, lesson_id in enumerate(lesson_ids):
            store.lessons.add(
                LessonRecord(
                    entity_id=lesson_id,
                    injection_form="Back off before retrying the payment gateway.",
                    summary=f"Retry the gateway with jittered exponential backoff, case {index}",
                    severity=("critical", "warning", "info")[index % 3],
                    status="active",
                    applies_to=("tag:payments", f"tag:gateway-{index}"),
                )
            )
        store.knowledge.add("The gateway answers 429 under load.", "docs/gateway/limits.md")
    admin_key = console_server.key(LAYOUT_NAMESPACE, "admin")
    base = console_server.url

    driver.get(base + "/console/signin")
    check_layout(driver, "signin")
    driver.find_element(By.ID, "key").send_keys(admin_key)
    follow(driver, driver.find_element(By.CSS_SELECTOR, "form.card button[type=submit]"))
    for by in ("complexity", "worker", "lesson"):
        driver.get(f"{base}/console/?range=all&by={by}")
        assert len(driver.find_elements(By.CSS_SELECTOR, "svg.chart")) == 4
        check_layout(driver, f"overview-by-{by}")
    # Every group's name is whole on hover, however it is cut on the chart.
    titles = [
        node.get_attribute("textContent")
        for node in driver.find_elements(By.CSS_SELECTOR, "svg[data-kind=bars] text.label title")
    ]
    assert len(titles) == 12
    assert all(title.split(": ")[0] in lesson_ids for title in titles)

    driver.get(base + "/console/lessons?q=gateway")
    check_layout(driver, "lessons")
    driver.set_window_size(390, 844)
    driver.refresh()
    rows = driver.find_elements(By.CSS_SELECTOR, "#lessons tbody tr")
    assert len(rows) == 14
    for column in ("lesson-id", "lesson-status", "lesson-severity", "lesson-summary"):
        assert hidden_boxes(driver, f"#lessons td.{column}") == [], column
    assert rows[0].find_element(By.CSS_SELECTOR, "td.lesson-summary").is_displayed()
    driver.set_window_size(1366, 900)

    driver.get(f"{base}/console/lessons/{lesson_ids[0]}")
    check_layout(driver, "lesson")
    driver.get(base + "/console/explain?tags=payments,gateway-3")
    check_layout(driver, "explain")
    driver.get(base + "/console/documents")
    check_layout(driver, "documents")
    driver.get(base + "/console/usage")
    check_layout(driver, "usage")
