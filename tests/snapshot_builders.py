"""Builders for SCHD and SCHS packages in the shape of the samples (SCHD/01_DNLD.xml, SCHS/*).

Used by the snapshot and season tests and by ``bench/bench_snapshot.py`` (which generates a
10,000-flight package with several gates, check-in desks, route points and stands per flight).
Output is compact (no indentation) so a 10,000-flight package stays near the 10 MB CIIMS limit.
"""

from __future__ import annotations

import itertools

from builders import envelope

_generation = itertools.count(1)
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")


def sodt(day: int, month: int = 9, year: int = 26, hhmm: str = "0800") -> str:
    """DDMONYYHHMM local time, e.g. sodt(9) -> '09SEP260800'."""
    return f"{day:02d}{_MONTHS[month - 1]}{year:02d}{hhmm}"


def fltr(flid: str, when: str = "09SEP260800", *, flno: str | None = None, stnd: str | None = "504",
         gates: int = 0, desks: int = 0, routes: int = 0, stands: int = 0, extra: str = "",
         reno: str = "B2574") -> str:
    """One FLTR record; ``gates``/``desks``/``routes``/``stands`` add that many collection entries."""
    parts = [f"<FLID>{flid}</FLID><ALCD>YG</ALCD><FLNO>{flno or 'YG' + flid[-4:]}</FLNO><MVIN>D</MVIN>"
             f"<SODT>{when}</SODT><FLTY>W</FLTY><FLIN>D</FLIN><ACFT>733</ACFT><RENO>{reno}</RENO>"
             f"<TRML>T2</TRML><MAXP>300</MAXP>"]
    if stnd:
        parts.append(f"<STND>{stnd}</STND>")
    t = when[:7]
    for n in range(1, gates + 1):
        parts.append(f'<GTDT GTNO="{n}"><GATE>G{n}{flid[-2:]}</GATE><PGOT>{t}0705</PGOT>'
                     f"<PGCT>{t}0735</PGCT><GTYP>D</GTYP></GTDT>")
    for n in range(1, desks + 1):
        parts.append(f'<CKDT CKNO="{n}"><CHKC>C{n:02d}</CHKC><PCOT>{t}0600</PCOT>'
                     f"<PCCT>{t}0720</PCCT><CTYP>D</CTYP></CKDT>")
    for n in range(1, routes + 1):
        parts.append(f'<ROUT RTNO="{n}"><APCD>XI{n}</APCD><SCAT>{t}1010</SCAT></ROUT>')
    for n in range(1, stands + 1):
        parts.append(f'<PSDT PSNO="{n}"><PSST>5{n:02d}</PSST><STST>{t}0500</STST><STET>{t}0830</STET></PSDT>')
    parts.append(extra)
    return "<FLTR>" + "".join(parts) + "</FLTR>"


def schd(styp: str, *records: str, recs: int | None = None, dttm: str = "20260908220000", **kw) -> str:
    """A SCHD message; ``recs`` overrides the RECS counter (to build invalid packages)."""
    count = len(records) if recs is None else recs
    return envelope("SCHD", styp, f"<SCHD><RECS>{count}</RECS>{''.join(records)}</SCHD>\n", dttm=dttm, **kw)


def dnld(*records: str, **kw) -> str:
    return schd("DNLD", *records, **kw)


def day_package(flids: list[str], day: int, month: int = 9, **kw) -> str:
    """A DNLD for one day with plain records (FS §3.3 example: A, B, C on 9/9 or 9/10).

    Every call is a new generation from the AODB: its aircraft registrations differ from every
    other call's, so a flight listed again is a change (new version, one event). A package with
    the same content again changes nothing (US-06 AC5): resend the same text under a new SEQN."""
    reno = f"B{next(_generation):04d}"
    return dnld(*(fltr(f, sodt(day, month), reno=reno) for f in flids), **kw)


def big_package(n: int, *, day: int = 9, gates: int = 2, desks: int = 3, routes: int = 2, stands: int = 2,
                prefix: str = "F", flids: list[str] | None = None) -> str:
    """A generated n-flight DNLD (bench and size tests); ``flids`` overrides the generated FLIDs."""
    flids = flids if flids is not None else [f"{prefix}{i:06d}" for i in range(n)]
    return dnld(*(fltr(f, sodt(day, hhmm=f"{(i // 60) % 24:02d}{i % 60:02d}"),
                       gates=gates, desks=desks, routes=routes, stands=stands) for i, f in enumerate(flids)))


def season(styp: str = "DNLD", *, snam: str = "Winter", sdat: str = "10SEP20", edat: str = "10JUN21",
           flights: tuple[str, ...] = ("LH724", "CA002"), recs: int | None = None, extra: str = "") -> str:
    """A SCHS package; each flight has one ROUT and two ERUT points like the samples."""
    records = []
    for flno in flights:
        records.append(
            f"<FLTR><ALCD>{flno[:2]}</ALCD><FLNO>{flno}</FLNO><MVIN>D</MVIN><STDT>14NOV20</STDT>"
            f"<EDDT>14MAR21</EDDT><DYOP>1200560</DYOP><SCHT>1023</SCHT><FLTY>P</FLTY><FLIN>I</FLIN>"
            f'<ROUT RTNO="1"><APCD>HKG</APCD><SCAT>1125</SCAT><SCDT>1330</SCDT></ROUT>'
            f'<ACFT>747</ACFT><ERUT RTNO="1"><APCD>CTU</APCD><SCDT>14MAR211023</SCDT><SDDC>-2</SDDC></ERUT>'
            f'<ERUT RTNO="2"><APCD>HKG</APCD><SCAT>14MAR211023</SCAT><SADC>+1</SADC></ERUT>{extra}</FLTR>')
    count = len(records) if recs is None else recs
    body = (f"<SCHS><SNAM>{snam}</SNAM><APCD>CTU</APCD><SDAT>{sdat}</SDAT><EDAT>{edat}</EDAT>"
            f"<RECS>{count}</RECS>{''.join(records)}</SCHS>\n")
    return envelope("SCHS", styp, body)


# --- reading the outcome back (plain SQL on the test database) -----------------------------------
def pump(app, *xmls: str) -> list[int]:
    """Put the messages in the mailbox and process everything processable at the ManualClock's
    current time (a FAILED head waiting for its backoff stops the run); returns their mailbox ids."""
    from msgx_engine.pipeline.pump import PumpOptions

    ids = [app.mailbox.put(x) for x in xmls]
    app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01)).run()
    return ids


def query(app, sql: str, **params) -> list[tuple]:
    from sqlalchemy import text

    with app.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql), params)]


def status(app, msg_id: int) -> tuple[str, str | None]:
    (row,) = query(app, "SELECT status, reason FROM proc_state WHERE msg_id = :m", m=msg_id)
    return row[0], row[1]


def ledger(app) -> dict:
    """fday -> (version, last_message_id)."""
    return {r[0]: (r[1], r[2]) for r in query(app, "SELECT fday, version, last_message_id FROM schd_gen")}


def members(app) -> dict:
    """fday -> set of FLIDs in the current member list."""
    out: dict = {}
    for fday, flid in query(app, "SELECT fday, flid FROM schd_gen_flid"):
        out.setdefault(fday, set()).add(flid)
    return out


def flights(app) -> dict:
    """flid -> (fday, deleted, state_version)."""
    return {r[0]: (r[1], r[2], r[3]) for r in query(app, "SELECT flid, fday, deleted, state_version FROM flight_schd")}


def events(app, msg_id: int) -> list[tuple]:
    """(flid, topic, kind, state_version) of one message's outbox events, in event order."""
    return query(app, "SELECT flid, topic, kind, state_version FROM msg_event WHERE msg_id = :m ORDER BY event_id",
                 m=msg_id)


def whole_state(app) -> tuple:
    """Everything a snapshot may change, for 'nothing changed' comparisons (INV-19, INV-31)."""
    return (ledger(app), members(app), flights(app),
            query(app, "SELECT msg_id, flid, kind, state_version, payload FROM msg_event ORDER BY event_id"),
            query(app, "SELECT flid, ordinal, gate FROM flight_gate ORDER BY flid, ordinal"),
            query(app, "SELECT msg_id, fday, version FROM schd_gen_run ORDER BY msg_id"))
