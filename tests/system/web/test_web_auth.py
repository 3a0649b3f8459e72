"""Who may read and who may act: sign-in, sessions, CSRF, read-only mode, and every action
landing in the audit log with ``web:<user>`` as its actor."""

from __future__ import annotations

import base64
import re
from datetime import timedelta

import pytest
from starlette.testclient import TestClient

from jobledger.testing import FakeClock
from jobledger.web import WebSettings, create_app
from jobledger.web.security import SESSION_COOKIE
from tests.system.web.conftest import TOKEN, USERS
from tests.system.web.helpers import (
    BEARER,
    HTML,
    JSON,
    SECRET,
    client_for,
    csrf_of,
    settings_for,
    sign_in,
)


@pytest.fixture
def store(sqlite_seeded):
    return sqlite_seeded[0].store


@pytest.fixture
def made(sqlite_seeded):
    return sqlite_seeded[1]


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"authorization": f"Basic {token}"}


def requeue_form(store, occurrence_id: str, **extra) -> dict:
    fence = store.get_occurrence(occurrence_id).fence
    return {"id": f"{occurrence_id}:{fence}", "reason": "fixed upstream", **extra}


# -- reading -------------------------------------------------------------------------------


def test_reads_need_a_sign_in_by_default(store):
    with client_for(store) as client:
        page = client.get("/occurrences?status=queued")
        assert page.status_code == 303
        assert page.headers["location"] == "/login?next=%2Foccurrences%3Fstatus%3Dqueued"
        api = client.get("/", headers={"accept": "*/*"})
        assert api.status_code == 401
        assert "Bearer" in api.headers["www-authenticate"]
        assert "Basic" in api.headers["www-authenticate"]
        assert client.get("/metrics", headers={"accept": "text/plain"}).status_code == 401
        assert client.get("/healthz").status_code == 200  # for load balancers


def test_header_credentials(store):
    with client_for(store) as client:
        assert client.get("/", headers=BEARER).status_code == 200
        assert client.get("/", headers=basic("alice", USERS["alice"])).status_code == 200
        for wrong in (
            {"authorization": "Bearer nope-nope-nope-nope"},
            basic("alice", "wrong"),
            basic("mallory", USERS["alice"]),
            {"authorization": "Basic !!!notbase64"},
            {"authorization": "Digest abc"},
        ):
            assert client.get("/", headers=wrong).status_code == 401


def test_htmx_polling_after_the_session_ends_redirects_the_page(store):
    with client_for(store) as client:
        response = client.get("/occurrences", headers={"hx-request": "true"})
        assert response.status_code == 200
        assert response.headers["hx-redirect"] == "/login?next=%2Foccurrences"


def test_public_reads_still_need_a_sign_in_to_act(store, made):
    with client_for(store, public_reads=True) as client:
        assert client.get("/").status_code == 200
        assert client.get("/metrics").status_code == 200
        page = client.get("/dead-letters").text
        assert 'type="checkbox"' not in page and "Sign in</a> to requeue" in page
        refused = client.post(
            "/dead-letters/requeue", data=requeue_form(store, made.dead_letters[0])
        )
        assert refused.status_code == 401
    assert store.get_occurrence(made.dead_letters[0]).status == "dead_letter"


def test_read_only_without_credentials_is_open_and_refuses_every_action(store, made):
    with client_for(store, read_only=True) as client:
        for path in ("/", "/jobs", "/dead-letters", f"/occurrences/{made.running}"):
            page = client.get(path)
            assert page.status_code == 200
            assert 'method="post"' not in page.text
            assert "read-only" in page.text
        for path, form in (
            ("/dead-letters/requeue", requeue_form(store, made.dead_letters[0])),
            ("/occurrences/cancel", {"id": made.running, "reason": "x"}),
            ("/jobs/enabled", {"job_id": "welcome-email", "enabled": "false", "revision": "1"}),
        ):
            assert client.post(path, data=form, headers=BEARER).status_code == 403
    assert store.get_occurrence(made.running).status == "running"
    assert store.get_job("welcome-email").enabled


def test_read_only_with_credentials_still_needs_a_sign_in_to_read(store):
    with client_for(store, read_only=True, token=TOKEN) as client:
        assert client.get("/").status_code == 303
        assert client.get("/", headers=BEARER).status_code == 200


# -- signing in ----------------------------------------------------------------------------


def test_login_sets_a_strict_http_only_session_cookie(store):
    clock = FakeClock(1_000_000)
    with client_for(store, clock=clock) as client:
        wrong = client.post("/login", data={"user": "alice", "password": "nope"})
        assert wrong.status_code == 401
        assert "not valid" in wrong.text
        clock.advance(timedelta(seconds=1))  # the back-off after one failed sign-in
        ok = client.post(
            "/login", data={"user": "alice", "password": USERS["alice"], "next": "/jobs"}
        )
        assert ok.status_code == 303 and ok.headers["location"] == "/jobs"
        cookie = ok.headers["set-cookie"]
        assert cookie.startswith(f"{SESSION_COOKIE}=")
        for attribute in ("HttpOnly", "SameSite=strict", "Path=/", "Max-Age=43200"):
            assert attribute.lower() in cookie.lower()
        page = client.get("/").text
        assert '<span data-testid="user">alice</span>' in page
        token_login = client.post("/login", data={"token": TOKEN})
        assert token_login.status_code == 303


@pytest.mark.parametrize(
    "target",
    ["https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:alert(1)"],
)
def test_login_never_redirects_off_site(store, target):
    with client_for(store) as client:
        response = client.post(
            "/login", data={"user": "alice", "password": USERS["alice"], "next": target}
        )
        assert response.headers["location"] == "/"


def test_a_tampered_or_expired_session_is_anonymous(store):
    clock = FakeClock(1_000_000)
    app = create_app(
        store,
        WebSettings(
            basic_auth=USERS, secret_key=SECRET, clock=clock, session_ttl=timedelta(hours=1)
        ),
    )
    with TestClient(app, headers=HTML, follow_redirects=False) as client:
        client.post("/login", data={"user": "alice", "password": USERS["alice"]})
        assert client.get("/").status_code == 200
        value = client.cookies[SESSION_COOKIE]
        body, _, signature = value.partition(".")
        client.cookies.clear()
        client.cookies.set(SESSION_COOKIE, body + "." + signature[::-1])
        assert client.get("/").status_code == 303
        client.cookies.clear()
        client.cookies.set(SESSION_COOKIE, value)
        assert client.get("/").status_code == 200
        clock.advance(timedelta(hours=1))
        assert client.get("/").status_code == 303


def test_changing_a_password_ends_its_sessions(store):
    with client_for(store) as client:
        sign_in(client)
        value = client.cookies[SESSION_COOKIE]
    changed = create_app(
        store, WebSettings(basic_auth={"alice": "a new password"}, secret_key=SECRET)
    )
    with TestClient(changed, headers=HTML, follow_redirects=False) as client:
        client.cookies.set(SESSION_COOKIE, value)
        assert client.get("/").status_code == 303


def test_sessions_live_in_the_dashboard_process(store):
    """A restart (a new app, same key and credentials) signs everyone out: docs/web.md says so."""
    with client_for(store) as client:
        sign_in(client)
        value = client.cookies[SESSION_COOKIE]
        assert client.get("/").status_code == 200
    same = create_app(store, WebSettings(basic_auth=USERS, token=TOKEN, secret_key=SECRET))
    with TestClient(same, headers=HTML, follow_redirects=False) as client:
        client.cookies.set(SESSION_COOKIE, value)
        assert client.get("/").status_code == 303


def test_logout_needs_the_csrf_token_and_clears_the_cookie(store):
    with client_for(store) as client:
        csrf = sign_in(client)
        assert client.post("/logout", data={}).status_code == 403
        out = client.post("/logout", data={"csrf_token": csrf})
        assert out.status_code == 303 and out.headers["location"] == "/login"
        assert f'{SESSION_COOKIE}=""' in out.headers["set-cookie"]
        assert client.get("/").status_code == 303


def test_a_cookie_copied_before_sign_out_stops_working(store, made):
    app = create_app(store, settings_for())
    with TestClient(app, headers=HTML, follow_redirects=False) as client:
        csrf = sign_in(client)
        copied = client.cookies[SESSION_COOKIE]
        other = TestClient(app, headers=HTML, follow_redirects=False)
        other.cookies.set(SESSION_COOKIE, copied)
        assert other.get("/").status_code == 200  # the copy works while the session lasts
        assert client.post("/logout", data={"csrf_token": csrf}).status_code == 303
        assert other.get("/").status_code == 303  # ended on the server, not only in a browser
        refused = other.post(
            "/dead-letters/requeue", data=requeue_form(store, made.dead_letters[0], csrf_token=csrf)
        )
        assert refused.status_code == 401
        again = sign_in(client)  # a new sign-in is a new session; the old one stays ended
        assert again != csrf
        assert client.get("/").status_code == 200
        assert other.get("/").status_code == 303
    assert store.get_occurrence(made.dead_letters[0]).status == "dead_letter"


def wrong(client: TestClient, user: str = "alice"):
    return client.post("/login", data={"user": user, "password": "not the password"})


WITH_BOB = {**USERS, "bob": "bob's long password"}


def right(client: TestClient, user: str = "alice"):
    return client.post("/login", data={"user": user, "password": WITH_BOB[user]})


def limited_app(store, clock):
    return create_app(store, settings_for(basic_auth=WITH_BOB, clock=clock))


def client_at(app, address: str) -> TestClient:
    return TestClient(app, headers=HTML, follow_redirects=False, client=(address, 50000))


def retry_after(response) -> int:
    assert response.status_code == 429, response.status_code
    return int(response.headers["retry-after"])


def test_failed_sign_ins_back_off_per_address_and_user_doubling_to_a_cap(store):
    clock = FakeClock(1_000_000)
    app = limited_app(store, clock)
    client = client_at(app, "192.0.2.7")
    waits = []
    for _ in range(9):
        assert wrong(client).status_code == 401
        limited = wrong(client)
        assert "Too many failed sign-ins for this user from here" in limited.text
        assert right(client).status_code == 429  # not even checked: an attacker learns nothing
        waits.append(retry_after(limited))
        clock.advance(timedelta(seconds=waits[-1] - 1))
        assert retry_after(right(client)) == 1
        clock.advance(timedelta(seconds=1))  # the wait passed (the fake clock; nothing sleeps)
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert right(client).status_code == 303  # a success clears the pair's back-off
    assert wrong(client).status_code == 401
    assert retry_after(wrong(client)) == 1


def test_a_pair_quiet_for_fifteen_minutes_starts_again_from_one_second(store):
    clock = FakeClock(1_000_000)
    app = limited_app(store, clock)
    client = client_at(app, "192.0.2.11")
    for wait in (1, 2, 4, 8):
        assert wrong(client).status_code == 401
        clock.advance(timedelta(seconds=wait))
    clock.advance(timedelta(minutes=15))
    assert wrong(client).status_code == 401
    assert retry_after(wrong(client)) == 1


def test_300_wrong_passwords_from_one_client_lock_nobody_out(store, monkeypatch):
    """Issue 30, item 8: 300 wrong passwords from one client refused the right password for
    the window — for that user from anywhere, and for every user behind that address."""
    clock = FakeClock(1_000_000)
    app = limited_app(store, clock)
    dash = app.app.state.dashboard
    checked: list[str] = []
    check = dash.guard.check_password
    monkeypatch.setattr(
        dash.guard, "check_password", lambda user, pw: checked.append(user) or check(user, pw)
    )
    attacker = client_at(app, "203.0.113.9")
    codes = [wrong(attacker).status_code for _ in range(300)]
    assert codes.count(401) == 1 and codes.count(429) == 299
    assert checked == ["alice"]  # the flood checked one password
    # The user, from anywhere else: at once.
    assert right(client_at(app, "198.51.100.4")).status_code == 303
    # Everyone else behind the attacker's address (one office, one NAT): at once.
    assert right(attacker, "bob").status_code == 303
    # The user behind that same address waits out the pair's back-off only: 1 s here.
    assert retry_after(right(attacker)) == 1
    clock.advance(timedelta(seconds=1))
    assert right(attacker).status_code == 303


def test_an_attacker_retrying_for_an_hour_slows_only_its_own_pair(store):
    clock = FakeClock(1_000_000)
    app = limited_app(store, clock)
    attacker = client_at(app, "203.0.113.10")
    colleague = client_at(app, "203.0.113.10")  # behind the same address
    elsewhere = client_at(app, "198.51.100.5")
    checked = 0
    for _ in range(3600):  # one guess a second, each time at the pair's pace at best
        checked += wrong(attacker).status_code == 401
        clock.advance(timedelta(seconds=1))
    assert checked <= 7 + 60  # 1+2+…+32 s for the first seven, then one a minute
    assert right(elsewhere).status_code == 303
    assert right(colleague, "bob").status_code == 303


def test_failures_for_one_user_from_many_addresses_lock_that_user_out_nowhere(store):
    clock = FakeClock(1_000_000)
    app = limited_app(store, clock)
    for index in range(40):
        assert wrong(client_at(app, f"198.51.100.{index}")).status_code == 401
    assert right(client_at(app, "198.51.100.200")).status_code == 303


def test_wrong_tokens_never_limit_the_token(store):
    clock = FakeClock(1_000_000)
    app = limited_app(store, clock)
    guesser = client_at(app, "203.0.113.1")
    wrong_token = {"authorization": "Bearer wrong-wrong-wrong-wrong"}
    for _ in range(100):
        assert guesser.get("/", headers=wrong_token).status_code == 401
        assert guesser.post("/login", data={"token": "wrong-wrong-wrong-wrong"}).status_code == 401
    # Neither the token from the guesser's own address nor from anywhere else is limited.
    assert guesser.get("/metrics", headers={**BEARER, "accept": "text/plain"}).status_code == 200
    assert guesser.post("/login", data={"token": TOKEN}).status_code == 303
    # Nor while the address waits for a user name.
    assert wrong(guesser).status_code == 401
    assert wrong(guesser).status_code == 429
    assert guesser.get("/", headers=BEARER).status_code == 200


def test_wrong_basic_credentials_in_headers_back_off_too(store):
    clock = FakeClock(1_000_000)
    app = limited_app(store, clock)
    client = client_at(app, "192.0.2.9")
    assert client.get("/", headers=basic("alice", "guess")).status_code == 401
    blocked = client.get("/", headers=basic("alice", USERS["alice"]))
    assert retry_after(blocked) == 1
    api = client.get("/", headers={**basic("alice", USERS["alice"]), **JSON})
    assert api.status_code == 429 and api.json()["error"] == "Too many sign-in attempts"
    assert client.get("/", headers=BEARER).status_code == 200
    assert (
        client_at(app, "192.0.2.10").get("/", headers=basic("alice", USERS["alice"])).status_code
        == 200
    )
    clock.advance(timedelta(seconds=1))
    assert client.get("/", headers=basic("alice", USERS["alice"])).status_code == 200
    # The right credentials cleared the pair: the next failure waits 1 s again, not 2.
    assert client.get("/", headers=basic("alice", "guess")).status_code == 401
    assert retry_after(client.get("/", headers=basic("alice", "guess"))) == 1


def test_a_token_in_the_query_string_never_signs_in(store):
    """``/login?token=…`` would put the token in access logs and browser history: only a POST
    signs in (the printed link carries the token in its fragment, which a script posts)."""
    settings = WebSettings(secret_key=SECRET, login_link=True)
    with TestClient(create_app(store, settings), headers=HTML, follow_redirects=False) as client:
        link = client.get(f"/login?token={settings.token}&next=/jobs")
        assert link.status_code == 200 and "set-cookie" not in link.headers
        assert "data-fragment-login" in link.text  # the page's script reads #token=…
        assert client.get("/jobs").status_code == 303
        posted = client.post("/login", data={"token": settings.token, "next": "/jobs"})
        assert posted.status_code == 303 and posted.headers["location"] == "/jobs"
        assert client.get("/jobs").status_code == 200
    with client_for(store) as client:  # a configured token: no fragment sign-in either
        page = client.get(f"/login?token={TOKEN}")
        assert page.status_code == 200 and "data-fragment-login" not in page.text
        assert client.get("/").status_code == 303
        assert client.post("/login", data={"token": TOKEN}).status_code == 303
        assert client.get("/").status_code == 200


# -- CSRF ----------------------------------------------------------------------------------


def test_session_actions_need_the_csrf_token(store, made):
    target = made.dead_letters[0]
    with client_for(store) as client:
        csrf = sign_in(client)
        missing = client.post("/dead-letters/requeue", data=requeue_form(store, target))
        assert missing.status_code == 403
        assert "CSRF" in missing.text
        forged = client.post(
            "/dead-letters/requeue", data=requeue_form(store, target, csrf_token="0" * 32)
        )
        assert forged.status_code == 403
        assert store.get_occurrence(target).status == "dead_letter"
        in_header = client.post(
            "/dead-letters/requeue",
            data=requeue_form(store, target),
            headers={"x-csrf-token": csrf},
        )
        assert in_header.status_code == 303
    assert store.get_occurrence(target).status == "retry_wait"


def test_cross_site_requests_are_refused_even_with_a_token(store, made):
    with client_for(store) as client:
        csrf = sign_in(client)
        form = requeue_form(store, made.dead_letters[0], csrf_token=csrf)
        for headers in (
            {"origin": "https://evil.example"},
            {"origin": "null"},
            {"sec-fetch-site": "cross-site"},
        ):
            assert (
                client.post("/dead-letters/requeue", data=form, headers=headers).status_code == 403
            )
        same = client.post(
            "/dead-letters/requeue",
            data=form,
            headers={"origin": "http://testserver", "sec-fetch-site": "same-origin"},
        )
        assert same.status_code == 303


def test_basic_auth_posts_need_the_csrf_token_too(store, made):
    """Browsers replay basic credentials on their own, so they prove nothing about intent."""
    auth = basic("alice", USERS["alice"])
    with client_for(store) as client:
        form = requeue_form(store, made.dead_letters[0])
        assert client.post("/dead-letters/requeue", data=form, headers=auth).status_code == 403
        csrf = csrf_of(client.get("/dead-letters", headers=auth).text)
        ok = client.post("/dead-letters/requeue", data={**form, "csrf_token": csrf}, headers=auth)
        assert ok.status_code == 303
    [event] = store.events(occurrence_id=made.dead_letters[0], event_type="occurrence_requeued")
    assert event.data["actor"] == "web:alice"


def test_bearer_requests_need_no_csrf_token_and_can_ask_for_json(store, made):
    first, second, third = made.dead_letters
    stale = f"{second}:{store.get_occurrence(second).fence + 5}"
    with client_for(store) as client:
        response = client.post(
            "/dead-letters/requeue",
            data={"id": [f"{first}:1", stale, f"{third}:1"], "reason": "bulk retry"},
            headers={**BEARER, **JSON},
        )
    assert response.status_code == 409  # one of them was refused
    body = response.json()
    assert body["requeued"] == [first, third]
    assert [item["id"] for item in body["failed"]] == [second]
    assert body["failed"][0]["code"] == "SCHEDULER_REQUEUE_EVIDENCE_CONFLICT"
    assert body["actor"] == "web:token"
    assert store.get_occurrence(second).status == "dead_letter"


def test_forms_are_checked(store, made):
    with client_for(store) as client:
        client.headers.update(BEARER)
        target = f"{made.dead_letters[0]}:1"
        assert client.post("/dead-letters/requeue", data={"id": target}).status_code == 400
        assert (
            client.post("/dead-letters/requeue", data={"id": target, "reason": "  "}).status_code
            == 400
        )
        assert client.post("/dead-letters/requeue", data={"reason": "x"}).status_code == 400
        assert (
            client.post("/dead-letters/requeue", data={"id": "nofence", "reason": "x"}).status_code
            == 400
        )
        many = {"id": [f"{made.dead_letters[0]}:{i}" for i in range(1, 202)], "reason": "x"}
        assert client.post("/dead-letters/requeue", data=many).status_code == 400
        assert client.post("/occurrences/cancel", data={"reason": "x"}).status_code == 400
        assert (
            client.post(
                "/jobs/enabled",
                data={"job_id": "welcome-email", "enabled": "maybe", "revision": "1"},
            ).status_code
            == 400
        )
        multipart = client.post(
            "/dead-letters/requeue", files={"id": ("a.txt", b"x")}, data={"reason": "x"}
        )
        assert multipart.status_code == 415
        huge = client.post(
            "/dead-letters/requeue",
            content=b"reason=" + b"x" * 300_000,
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert huge.status_code == 413


# -- actions and the audit log -------------------------------------------------------------


def test_requeue_lands_in_the_audit_log_with_actor_and_reason(store, made):
    target = made.dead_letters[1]
    with client_for(store) as client:
        csrf = sign_in(client)
        page = client.get(f"/occurrences/{target}").text  # the occurrence page offers it too
        fence = store.get_occurrence(target).fence
        assert f'name="id" value="{target}:{fence}"' in page
        assert 'action="/dead-letters/requeue"' in page
        response = client.post(
            "/dead-letters/requeue",
            data=requeue_form(
                store, target, csrf_token=csrf, next="/dead-letters?job=billing-export"
            ),
        )
        assert response.status_code == 303
        assert response.headers["location"] == "/dead-letters?job=billing-export"
        after = client.get(response.headers["location"]).text
        assert "Requeued 1 dead letter as web:alice." in after
        # The note links to the requeued occurrence (the list no longer shows it).
        assert re.search(rf'<a class="id" href="/occurrences/{target}"[^>]*>', after)
        assert "Requeued 1 dead letter" not in client.get("/dead-letters").text  # shown once
        again = client.post(
            "/dead-letters/requeue", data=requeue_form(store, target, csrf_token=csrf)
        )
        assert "was not requeued" in client.get(again.headers["location"]).text
    [event] = store.events(occurrence_id=target, event_type="occurrence_requeued")
    assert event.data["actor"] == "web:alice"
    assert event.data["reason"] == "fixed upstream"


def test_cancel_from_the_occurrence_page(store, made):
    with client_for(store) as client:
        csrf = sign_in(client)
        page = client.get(f"/occurrences/{made.running}").text
        assert 'action="/occurrences/cancel"' in page
        response = client.post(
            "/occurrences/cancel",
            data={
                "id": made.running,
                "reason": "stuck on a bad host",
                "csrf_token": csrf,
                "next": f"/occurrences/{made.running}",
            },
        )
        assert response.headers["location"] == f"/occurrences/{made.running}"
        settled = client.post(
            "/occurrences/cancel", data={"id": made.running, "reason": "again", "csrf_token": csrf}
        )
        assert "Not cancelled" in client.get(settled.headers["location"]).text
        missing = client.post(
            "/occurrences/cancel", data={"id": "occ_missing", "reason": "x", "csrf_token": csrf}
        )
        assert missing.status_code == 303
        succeeded = client.get(f"/occurrences/{made.reclaimed}").text
        assert 'action="/occurrences/cancel"' not in succeeded  # only live ones can be cancelled
    [event] = store.events(occurrence_id=made.running, event_type="occurrence_cancelled")
    assert event.data["actor"] == "web:alice"
    assert event.data["reason"] == "stuck on a bad host"
    assert store.get_occurrence(made.running).status == "cancelled"


def test_enable_and_disable_with_revision_check(store):
    with client_for(store) as client:
        csrf = sign_in(client)
        job = store.get_job("sync-inventory")
        page = client.get("/jobs").text
        assert 'data-testid="toggle-sync-inventory"' in page
        form = {
            "job_id": job.id,
            "enabled": "false",
            "revision": str(job.revision),
            "csrf_token": csrf,
        }
        done = client.post("/jobs/enabled", data=form)
        assert "Disabled sync-inventory as web:alice." in client.get(done.headers["location"]).text
        stale = client.post("/jobs/enabled", data={**form, "enabled": "true"})
        assert "changed since the page was loaded" in client.get(stale.headers["location"]).text
        assert store.get_job(job.id).enabled is False
        fresh = {**form, "enabled": "true", "revision": str(job.revision + 1)}
        client.post("/jobs/enabled", data=fresh)
        assert store.get_job(job.id).enabled is True
        json_answer = client.post(
            "/jobs/enabled",
            data={**fresh, "enabled": "false", "revision": str(job.revision + 2)},
            headers=JSON,
        )
        assert json_answer.json() == {
            "ok": True,
            "id": job.id,
            "enabled": False,
            "revision": job.revision + 3,
        }
    actors = [e.data["actor"] for e in store.events(job_id=job.id, event_type="job_updated")]
    assert actors == ["web:alice"] * 3


def test_pages_carry_forms_only_for_signed_in_users(store):
    with client_for(store, public_reads=True) as client:
        anonymous = client.get("/jobs").text
        assert 'action="/jobs/enabled"' not in anonymous
        sign_in(client)
        signed_in = client.get("/jobs").text
        assert 'action="/jobs/enabled"' in signed_in
        assert len(re.findall(r'name="csrf_token" value="[0-9a-f]{32}"', signed_in)) >= 5
