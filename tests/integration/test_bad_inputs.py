"""The bad-input corpus (tests/data/bad-inputs, INDEX.tsv) through both doors.

Mailbox: every storable case is inserted as raw bytes into the real MariaDB mailbox, each followed
by a good GTDT; one drain; each case must end as its index row says (status, reason, a detail
naming the cause) and every good message behind it must SUCCEED: no hostile row blocks or takes
down another (US-03 AC4, INV-3). A case MariaDB refuses to store is checked
to be refused by the server (no such row can ever exist).

HTTP: every case is POSTed to ``/cminmsgs/send`` (the ASGI app on the test's real databases) and
must get the index's status and error code; an accepted body is stored exactly as its UTF-8 text.
"""

from __future__ import annotations

import pymysql
from sqlalchemy import select
from sqlalchemy.engine import make_url

from msgx_engine.store.tables import proc_state
from tests.bad_inputs import CORPUS, Expected, cases
from tests.builders import gtdt
from tests.http_support import client_for
from tests.pipeline_support import drain_now

CASES = cases()
ER_TRUNCATED_WRONG_VALUE_FOR_FIELD = 1366


def _connect(mailbox_url: str) -> pymysql.Connection:
    u = make_url(mailbox_url)
    return pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, password=u.password or "",
                           database=u.database, charset="utf8mb4", autocommit=True)


def _insert_raw(cur, data: bytes) -> int:
    """The bytes as the AODB's adapter could have stored them: text when they are UTF-8, else the
    raw bytes (pymysql sends those as a _binary literal, twice their size: small cases only)."""
    try:
        value: str | bytes = data.decode("utf-8")
    except UnicodeDecodeError:
        value = data
    cur.execute("INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_STATUS) VALUES (%s, 'VALID')", (value,))
    return int(cur.lastrowid)


def _refused_by_mariadb(cur, data: bytes) -> bool:
    """Whether MariaDB (strict mode) refuses to store ``data`` in a column like CMINMSGS_CLOB_MSG.
    Tried on a temporary copy of the table, so the mailbox's ids stay contiguous."""
    cur.execute("CREATE TEMPORARY TABLE IF NOT EXISTS probe LIKE cminmsgs")
    try:
        cur.execute("INSERT INTO probe (CMINMSGS_CLOB_MSG, CMINMSGS_STATUS) VALUES (%s, 'VALID')", (data,))
    except pymysql.err.DataError as exc:
        return exc.args[0] == ER_TRUNCATED_WRONG_VALUE_FOR_FIELD
    return False


def test_the_corpus_is_indexed_and_large_enough():
    """At least 60 bad inputs, every file indexed once, every
    expectation in the documented form."""
    files = {p.name for p in CORPUS.iterdir()} - {"INDEX.tsv"}
    assert len(CASES) >= 60
    assert sorted(c.file for c in CASES) == sorted(files)
    statuses = {"SUCCEEDED", "DEAD", "SKIPPED", "UNSTORABLE"}
    assert all(c.mailbox.status in statuses and c.http.status.isdigit() for c in CASES)
    assert all(c.mailbox.code for c in CASES if c.mailbox.status in ("DEAD", "SKIPPED"))


def _observed_row(row) -> tuple[Expected, str]:
    return Expected(row.status, row.reason or ""), row.error_detail or ""


def test_every_bad_input_through_the_mailbox_ends_as_indexed_and_never_blocks_a_good_one(app):
    """The corpus: each storable case inserted as raw bytes, a good GTDT
    after each, one drain (it exits: nothing waits). Each case gets its indexed status and reason
    with a detail naming the cause (encoding, the META field, FLID...); every good message
    SUCCEEDED. Unstorable bytes are refused by MariaDB itself."""
    placed: dict[str, int] = {}
    good: dict[str, int] = {}
    unstorable: dict[str, bool] = {}
    conn = _connect(app.settings.mailbox_url)
    try:
        with conn.cursor() as cur:
            for n, case in enumerate(CASES):
                data = case.body()
                if not case.storable:
                    unstorable[case.file] = _refused_by_mariadb(cur, data)
                    continue
                placed[case.file] = _insert_raw(cur, data)
                good[case.file] = _insert_raw(cur, gtdt(f"OK{n:03d}", (1, "A1")).encode())
    finally:
        conn.close()
    drain_now(app)
    with app.engine.connect() as pg:
        rows = {r.msg_id: r for r in pg.execute(select(proc_state))}
    assert unstorable == {c.file: True for c in CASES if not c.storable}
    observed = {f: _observed_row(rows[i])[0] for f, i in placed.items()}
    assert {c.file: (observed[c.file], c.mailbox) for c in CASES
            if c.storable and observed[c.file] != c.mailbox} == {}
    details = {f: _observed_row(rows[placed[f]])[1] for f in placed}
    missing = {c.file: details[c.file] for c in CASES
               if c.storable and c.mailbox_detail.lower() not in details[c.file].lower()}
    assert missing == {}
    assert {f: rows[i].status for f, i in good.items()} == {f: "SUCCEEDED" for f in good}


def test_every_bad_input_through_post_cminmsgs_send_gets_its_indexed_answer(app):
    """6 and the corpus over HTTP: the indexed status and err_code (error JSON)
    for each case; an accepted body is stored exactly as its UTF-8 text (a BOM dropped)."""
    client = client_for(app)
    observed, stored_as_sent = {}, {}
    for case in CASES:
        data = case.body()
        resp = client.post("/cminmsgs/send", content=data, headers={"Content-Type": "text/xml"})
        doc = resp.json()
        observed[case.file] = Expected(str(resp.status_code), "" if doc["is_success"] else doc["err_code"])
        if doc["is_success"]:
            stored_as_sent[case.file] = app.mailbox.body(doc["body"]) == data.decode("utf-8").removeprefix("\ufeff")
    assert {c.file: (observed[c.file], c.http) for c in CASES if observed[c.file] != c.http} == {}
    assert stored_as_sent == {c.file: True for c in CASES if c.http.status == "200"}
