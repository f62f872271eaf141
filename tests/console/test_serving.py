"""The console's files as the API serves them: at `/` and each page's address, under the
Host and token rules, with their content types, validators and methods."""

from __future__ import annotations

import httpx
import pytest

from majordomus.api.console import ASSETS
from tests.api.conftest import ApiProcess
from tests.console.conftest import console_api

pytestmark = [pytest.mark.process, pytest.mark.slow]


def test_every_page_address_answers_the_shell(http: httpx.Client) -> None:
    for path in (
        "/", "/queue", "/schedules", "/episodes", "/start", "/executions/x-20260101T000000Z-0a1b2c3d"
    ):
        response = http.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"] == "text/html; charset=utf-8"
        assert '<script type="module" src="/console/app.js">' in response.text
    assert http.get("/docs").status_code == 200  # the operation list stays at /docs


def test_each_file_has_its_type_a_validator_and_no_stale_cache(http: httpx.Client) -> None:
    expected = {
        "app.js": "text/javascript",
        "api.js": "text/javascript",
        "form.js": "text/javascript",
        "console.css": "text/css",
    }
    for name, kind in expected.items():
        response = http.get(f"/console/{name}")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(kind)
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.content == ASSETS[name].body
        again = http.get(f"/console/{name}", headers={"If-None-Match": response.headers["etag"]})
        assert again.status_code == 304 and again.content == b""


def test_head_answers_the_headers_and_other_methods_are_refused(http: httpx.Client) -> None:
    head = http.head("/console/app.js")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(ASSETS["app.js"].body))
    refused = http.post("/console/app.js")
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
    assert http.get("/console/nothing.js").json()["error"]["code"] == "not_found"
    assert http.get("/executions/a/b").status_code == 404


def test_nothing_is_loaded_from_another_origin(http: httpx.Client) -> None:
    for asset in ASSETS.values():
        # The SVG namespace (charts.js draws its charts with it) names XML, loads nothing.
        text = asset.body.decode().replace("http://www.w3.org/2000/svg", "")
        assert "http://" not in text.replace("http://127.0.0.1", "") and "https://" not in text


def test_a_foreign_host_is_refused_and_the_shell_needs_no_token(
    http: httpx.Client, console_redis_url: str
) -> None:
    assert http.get("/", headers={"Host": "rebound.example"}).status_code == 421
    locked: ApiProcess = console_api(console_redis_url, MAJORDOMUS_API_TOKEN="s3cret").start()
    try:
        with locked.client() as client:
            assert client.get("/").status_code == 200
            assert client.get("/console/app.js").status_code == 200
            assert client.get("/api/v1/executions").status_code == 401
    finally:
        locked.close()
