"""The web console in a real browser: headless Chromium (Debian's
``chromium`` and ``chromium-driver``, installed by ``make setup``) driven
over WebDriver (selenium) against a real ``vakit api`` process and a real
worker on PostgreSQL shards, firing a local HTTP target.

A person signs in with the keyboard, finds a failed job among the dead
letters, retries it and watches it succeed (the job page refreshes itself
while the worker runs it); pauses a cron and sees its next fire go; a
tenant opens another tenant's job by URL and gets "not found"; an operator
sees the cluster, and ``/docs`` renders from vendored files. Times show in
the browser's zone (the browser runs in America/New_York) with the UTC
instant on hover.

A screenshot of each page is written to ``bench-out/console-screens/`` (or
``$VAKIT_SCREENSHOT_DIR``); the path is printed at the end of the module.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from cluster.api.console.lateness_chart import seconds_text
from cluster.local.pgserver import PgServer
from tests.pgfixtures import clone_databases, drop_databases
from tests.procs import FaultSink, ProcessHarness, VakitProcess, running_processes

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TOKENS = {"tok-a": "svc-a", "tok-b": "svc-b"}
OPERATOR = "fault-token"  # tests.procs.FAULT_SETTINGS: an operator named svc
BROWSER_ZONE = "America/New_York"
# A polling page (htmx ``every 2s``, outerHTML) may replace an element
# between finding it and reading its text: a wait then looks again.
SWAPPED = (StaleElementReferenceException,)


@dataclass
class Console:
    api: VakitProcess
    worker: VakitProcess
    sink: FaultSink
    driver: webdriver.Chrome
    shots: Path

    @property
    def url(self) -> str:
        return self.api.base_url

    def call(self, method: str, path: str, token: str = "tok-a", **kw: Any) -> httpx.Response:
        return httpx.request(
            method, self.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=10, **kw
        )

    def open(self, path: str) -> None:
        self.driver.get(self.url + path)

    def shot(self, name: str) -> None:
        self.driver.save_screenshot(str(self.shots / f"{name}.png"))

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def wait(self, css: str, timeout: float = 15.0) -> WebElement:
        found: list[WebElement] = []

        def present(d: Any) -> bool:
            found[:] = d.find_elements(By.CSS_SELECTOR, css)
            return bool(found)

        WebDriverWait(self.driver, timeout, poll_frequency=0.1, ignored_exceptions=SWAPPED).until(present)
        return found[0]

    def wait_text(self, css: str, text: str, timeout: float = 20.0) -> None:
        def shows(d: Any) -> bool:
            return any(text in e.text for e in d.find_elements(By.CSS_SELECTOR, css))

        WebDriverWait(self.driver, timeout, poll_frequency=0.2, ignored_exceptions=SWAPPED).until(shows)

    def sign_in(self, token: str, then: str) -> None:
        """Sign in from wherever ``then`` sends a stranger, with the keyboard."""
        self.driver.delete_all_cookies()
        self.open(then)
        field = self.wait("#token")
        assert self.driver.switch_to.active_element == field  # autofocus: type at once
        field.send_keys(token, Keys.ENTER)
        self.wait("#who")


def chrome(zone: str) -> webdriver.Chrome:
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert browser and driver, (
        "the browser tests need Debian's chromium and chromium-driver: run `make setup`"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--lang=en-US"):  # fmt: skip
        options.add_argument(arg)
    # The given driver binary: selenium downloads nothing.
    service = Service(executable_path=driver, env={**os.environ, "TZ": zone})
    return webdriver.Chrome(options=options, service=service)


@pytest.fixture(scope="module")
def console(pg_servers: list[PgServer], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    dsns = clone_databases(pg_servers)
    shots = Path(os.environ.get("VAKIT_SCREENSHOT_DIR", REPO / "bench-out" / "console-screens"))
    shots.mkdir(parents=True, exist_ok=True)
    logs = tmp_path_factory.mktemp("console-procs")
    tokens = ",".join(f"{t}={o}" for t, o in TOKENS.items())
    try:
        with FaultSink() as sink, running_processes(dsns, logs) as procs:
            api, worker = start(procs, tokens)
            driver = chrome(BROWSER_ZONE)
            try:
                yield Console(api, worker, sink, driver, shots)
            finally:
                driver.quit()
                print(f"\nconsole screenshots: {shots}")
    finally:
        drop_databases(dsns)


def start(procs: ProcessHarness, tokens: str) -> tuple[VakitProcess, VakitProcess]:
    api = procs.api("api", api_tokens=tokens)
    worker = procs.worker("w-console")
    return api.wait_ready(), worker.wait_ready()


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def failed_job(c: Console, kind: str) -> str:
    """A job whose only attempt gets a 503: FAILED after one attempt. Its
    retry is attempt 2, which the sink answers 200 (``fail: 1``)."""
    r = c.call(
        "POST", "/api/v1/jobs",
        json={"type": kind, "runAt": now_iso(), "target": {"kind": "HTTP", "url": c.sink.url},
              "payload": {"fail": 1}, "maxAttempts": 1, "timeoutSeconds": 10},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    job = str(r.json()["jobId"])
    deadline = time.monotonic() + 30
    while (status := c.call("GET", f"/api/v1/jobs/{job}").json()["status"]) != "FAILED":
        assert time.monotonic() < deadline, f"job {job} is {status}, not FAILED, after 30 s"
        time.sleep(0.2)
    return job


def test_sign_in_find_a_failed_job_retry_it_and_see_it_succeed(console: Console) -> None:
    c = console
    job = failed_job(c, "SETTLEMENT_REPORT")
    c.sign_in("tok-a", "/ui/dead-letters")
    c.shot("01-dead-letters")
    group = c.find("#dead-letters tbody tr")
    assert "SETTLEMENT_REPORT" in group.text and "503" in group.text
    group.find_element(By.LINK_TEXT, "SETTLEMENT_REPORT").click()
    c.wait(f'tr[data-job="{job}"]')
    assert c.find("#f-status").get_attribute("value") == "FAILED"
    c.shot("02-jobs-failed")
    c.find(f'tr[data-job="{job}"] a').click()
    c.wait_text("#job-status", "FAILED")
    assert "503" in c.find("#last-error").text
    c.shot("03-job-failed")
    c.find("#retry").click()
    c.wait_text("#flash", "Retried")
    # No reload from here: the page polls its state until the job finishes.
    c.wait_text("#job-status", "SUCCEEDED", timeout=30)
    assert not c.driver.find_elements(By.CSS_SELECTOR, "#retry, #cancel")  # refreshed with it
    rows = c.driver.find_elements(By.CSS_SELECTOR, "#attempts tbody tr")
    log = [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]
    # The failed attempt, the retry's mark, the attempt that succeeded.
    assert log[0][0] == "1" and log[0][4] == "ERROR" and "503" in log[0][6], log
    assert log[-1][0] == "2" and log[-1][4] == "SUCCEEDED" and log[-1][1] == "w-console", log
    assert any("new series" in row[6] for row in log[1:-1]), log
    c.shot("04-job-retried-succeeded")
    assert c.call("GET", f"/api/v1/jobs/{job}").json()["status"] == "SUCCEEDED"
    assert {f.attempt for f in c.sink.snapshot() if f.job_id == job} == {1, 2}
    # Times are in the browser's zone, the UTC instant on hover.
    stamp = c.find("#job-state time")
    assert (stamp.get_attribute("title") or "").endswith("Z (UTC)")
    assert stamp.text != stamp.get_attribute("datetime") and ("EST" in stamp.text or "EDT" in stamp.text)


def test_pause_a_cron_and_its_next_fire_disappears(console: Console) -> None:
    c = console
    r = c.call(
        "POST", "/api/v1/cron-jobs",
        json={"name": "nightly-settlement", "schedule": "0 2 * * *", "timeZone": "Europe/Istanbul",
              "target": {"kind": "HTTP", "url": c.sink.url}},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    cron = r.json()["cronJobId"]
    c.sign_in("tok-a", "/ui/crons")
    row = c.wait(f'tr[data-cron="{cron}"]')
    assert row.find_elements(By.CSS_SELECTOR, ".next-fire time"), row.text
    assert "+03" in row.text and "ACTIVE" in row.text  # the cron's own zone, beside the viewer's
    c.shot("05-crons")
    row.find_element(By.LINK_TEXT, "nightly-settlement").click()
    c.wait("#preview")
    assert len(c.driver.find_elements(By.CSS_SELECTOR, "#preview tbody tr")) == 10
    assert c.find("#next-fire time")
    c.shot("06-cron")
    c.find("#reason").send_keys("target migration")
    c.find("#pause").click()
    c.wait_text("#flash", "Paused")
    assert "none while paused" in c.find("#next-fire").text
    assert not c.driver.find_elements(By.CSS_SELECTOR, "#next-fire time, #preview")
    assert "target migration" in c.find("#cron-state").text
    c.shot("07-cron-paused")
    c.open("/ui/crons")
    row = c.wait(f'tr[data-cron="{cron}"]')
    assert not row.find_elements(By.CSS_SELECTOR, ".next-fire time") and "PAUSED" in row.text
    c.driver.set_window_size(390, 844)  # a phone
    try:
        c.shot("08-crons-phone")
        width = c.driver.execute_script("return document.documentElement.scrollWidth")
        assert width <= 400, f"the page scrolls sideways at phone width ({width} px)"
    finally:
        c.driver.set_window_size(1280, 900)
    assert c.call("GET", f"/api/v1/cron-jobs/{cron}").json()["paused"] is True


def test_a_tenant_cannot_see_another_tenants_job_by_url(console: Console) -> None:
    c = console
    r = c.call("POST", "/api/v1/jobs", json={
        "type": "PAYROLL", "runAt": "2030-01-01T00:00:00Z",
        "target": {"kind": "HTTP", "url": c.sink.url}})  # fmt: skip
    assert r.status_code == 201, r.text
    job = r.json()["jobId"]
    c.sign_in("tok-b", f"/ui/jobs/{job}")
    c.wait("#error-title")
    assert "no such job" in c.find("#error-detail").text
    assert "PAYROLL" not in c.driver.page_source
    c.shot("09-other-tenants-job")
    c.open("/ui/cluster")
    c.wait("#error-title")
    assert "operator" in c.find("#error-detail").text
    c.sign_in("tok-a", f"/ui/jobs/{job}")
    c.wait_text("#job-status", "SCHEDULED")


def test_a_cron_that_ran_shows_its_last_result_in_the_list_and_on_its_page(console: Console) -> None:
    c = console
    r = c.call(
        "POST", "/api/v1/cron-jobs",
        json={"name": "yearly-export", "schedule": "0 3 1 1 *", "timeZone": "UTC",
              "target": {"kind": "HTTP", "url": c.sink.url}, "payload": {"fail": 1},
              "maxAttempts": 1},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    cron = r.json()["cronJobId"]
    c.sign_in("tok-a", "/ui/crons")
    row = c.wait(f'tr[data-cron="{cron}"]')
    assert row.find_element(By.CSS_SELECTOR, ".last-result").text == "—"  # never ran
    # Triggered now, the occurrence's only attempt gets a 503: FAILED.
    assert c.call("POST", f"/api/v1/cron-jobs/{cron}/trigger").status_code in (200, 201, 202)
    deadline = time.monotonic() + 30
    while (shown := c.call("GET", f"/api/v1/cron-jobs/{cron}").json())["lastResult"] != "FAILED":
        assert time.monotonic() < deadline, f"no FAILED last result after 30 s: {shown}"
        time.sleep(0.2)
    assert shown["lastSuccessAt"] is None and shown["lastResultAt"]
    c.open("/ui/crons")
    cell = c.wait(f'tr[data-cron="{cron}"] .last-result')
    assert "FAILED" in cell.text
    assert cell.find_element(By.TAG_NAME, "time").get_attribute("datetime") == shown["lastResultAt"]
    c.shot("12-crons-last-result")
    c.open(f"/ui/crons/{cron}")
    c.wait_text("#last-result", "FAILED")
    assert c.find("#last-result time").get_attribute("datetime") == shown["lastResultAt"]


def test_an_operator_sees_the_cluster_and_docs_render_offline(console: Console) -> None:
    c = console
    # A job of this test's own runs first: the lateness figures have at
    # least its attempt, whichever tests ran before.
    r = c.call("POST", "/api/v1/jobs", json={
        "type": "LATENESS_PROBE", "runAt": now_iso(), "target": {"kind": "HTTP", "url": c.sink.url}})  # fmt: skip
    assert r.status_code == 201, r.text
    job = r.json()["jobId"]
    deadline = time.monotonic() + 30
    while (done := c.call("GET", f"/api/v1/jobs/{job}").json())["status"] != "SUCCEEDED":
        assert time.monotonic() < deadline, f"job {job} did not succeed in 30 s: {done}"
        time.sleep(0.2)
    [attempt] = [a for a in done["attempts"] if a["latenessSeconds"] is not None]
    c.sign_in(OPERATOR, "/ui/cluster")
    c.wait("#shards")
    assert len(c.driver.find_elements(By.CSS_SELECTOR, "#shards tbody tr")) == 2
    assert "w-console" in c.find("#members").text
    # The page shows what the API says, and the API has this job's attempt.
    api = c.call("GET", "/api/v1/cluster/lateness", token=OPERATOR).json()
    assert sum(m["count"] for m in api["cluster"]) >= 1 and api["missingShards"] == []
    assert max(m["maxSeconds"] for m in api["cluster"]) >= max(attempt["latenessSeconds"], 0.0)
    latest = api["cluster"][-1]
    assert c.find("#lateness-count").text == str(latest["count"])
    for name in ("p50", "p99"):
        text = c.find(f"#lateness-{name}").text
        assert text == seconds_text(latest[f"{name}Seconds"]), (name, text, latest)
    chart = c.find("#lateness-chart")
    points = chart.find_elements(By.CSS_SELECTOR, "circle.p99")
    assert len(points) == len(api["cluster"]) and chart.find_elements(By.CSS_SELECTOR, "polyline.p50")
    minutes = c.driver.find_elements(By.CSS_SELECTOR, "#lateness tbody tr")
    counts = [int(m.find_elements(By.TAG_NAME, "td")[1].get_attribute("textContent") or "0") for m in minutes]
    assert counts == [m["count"] for m in reversed(api["cluster"])]
    shard_cells = [e.text for e in c.driver.find_elements(By.CSS_SELECTOR, "#shards .shard-lateness")]
    assert any(" / " in text for text in shard_cells), shard_cells
    c.shot("10-cluster")
    c.open("/docs")
    try:
        title = c.wait(".swagger-ui .info .title", timeout=20)
    except WebDriverException as exc:
        raise AssertionError(f"Swagger UI did not render: {c.driver.page_source[:500]}") from exc
    assert "Vakit" in title.text
    c.shot("11-docs")
    c.open("/ui/crons")
    c.find("#who").find_element(By.XPATH, "following-sibling::button").click()
    c.wait("#token")  # signed out
