"""Random sequences of flight messages against a small reference model of the spec's rules, on the
real PostgreSQL writer through the pump, one commit per message and grouped (P10, P13).

Hypothesis draws, for a handful of flights (a master, two code-share children), a sequence of
SCHD/DNLD daily schedules, SCHD/ADFT records, FLOP/FDEL deletions and FLOP changes (STND, PAXC,
GTDT, MAID: the code-share link), and puts it through the mailbox. The model (``Model``) applies
the same sequence by the rules as docs/flop-subtypes.md and docs/snapshots.md state them, and the
stored state must equal it: which flights exist and which are deleted (FS §5.4, D2, INV-29,
S3), the latest STND, PAXC, gate and MAID of every stored flight, hidden fields of deleted ones
included (F6), the derived MAFL of every live flight (D30, C1), the code-share cascade of FDEL and
of the diff delete (INV-21, C-25, L5, decision C3), what a child passes to its master and what it
keeps (US-05 AC4, decision C4), and the day's member list (D1, L8). Every message ends SUCCEEDED.

Each example works on FLIDs and a day of its own in the test's database, so examples need no
fresh database; the model is checked after every drain. The draws are steered by the model's
state (``rare``): half the messages take the sequence one step further into a shape where issue
52 found wrong state (a FDEL to a flight never stored, a gate written to that tombstone, an ADFT
restoring it with a gate, decision C2; a child's record naming a master never stored, then that
master's FDEL, C3; a master's and its child's records in one ADFT, C4), the other half are any
message. The run is derandomized (a fixed seed): CI tries the three known-bad sequences (C2, C3, C4) first
(``_known_bad``), then draws the same ``MSGX_PROPERTY_EXAMPLES`` examples (default 50) per path
every time, 40-75 s for both paths on this two-core machine, by its load.
Against the code before each of the C2, C3 and C4 fixes, the drawn examples alone
(``MSGX_PROPERTY_PINNED=0``) find it in both paths as well as the pinned sequences. A larger run
by hand: ``MSGX_PROPERTY_EXAMPLES=500 .venv/bin/python -m pytest -p no:cacheprovider
tests/integration/test_flight_state_properties.py``.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field, replace
from datetime import date, timedelta

import pytest
from builders import envelope, flop
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from msgx_engine.operations.skip import skip
from msgx_engine.store.flights import FlightRepository
from tests.pipeline_support import drain_now
from tests.snapshot_builders import query

EXAMPLES = int(os.environ.get("MSGX_PROPERTY_EXAMPLES", "50"))
# "0": the drawn examples alone, without the pinned C2-C4 sequences (to check what the draws reach)
PINNED = os.environ.get("MSGX_PROPERTY_PINNED", "1") != "0"
MASTERS, CHILDREN = ("A",), ("C", "D")       # a master and two code-share children
ROLES = MASTERS + CHILDREN
FIELDS = ("STND", "PAXC", "GTDT", "MAID")
# FLOP and FDEL weigh more than snapshots: the rare sequences (a tombstone, a hidden write, its
# restore) are built from them, and a DNLD resets much of what came before
KINDS = ("dnld", "adft", "adft", "fdel", "fdel", "flop", "flop", "flop")
SHARED = ("STND", "GTDT")             # passed from a live child to its master (decision C4)
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_examples = itertools.count()

stands = st.sampled_from(["S1", "S2"])
counts = st.sampled_from(["20", "151"])
gates_ = st.sampled_from(["G1", "G2"])


# --- the sequences -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """One flight's FLTR: the values it carries (None: not carried)."""

    role: str
    stnd: str | None = None
    paxc: str | None = None
    gate: str | None = None
    maid: str | None = None        # a master's role: children only

    def values(self) -> dict[str, str | None]:
        return {"STND": self.stnd, "PAXC": self.paxc, "GTDT": self.gate, "MAID": self.maid}


@dataclass(frozen=True)
class Op:
    """One message: ``kind`` dnld | adft | fdel | flop (``styp``, ``role``, ``value``: None clears)."""

    kind: str
    records: tuple[Record, ...] = ()
    role: str = ""
    styp: str = ""
    value: str | None = None
    cut: bool = False              # the grouped run drains after this message


@st.composite
def records(draw) -> tuple[Record, ...]:
    roles = draw(st.lists(st.sampled_from(ROLES), min_size=1, max_size=4, unique=True))
    return tuple(record(draw, role) for role in roles)


def record(draw, role: str, **fixed: str) -> Record:
    """One record of ``role``: each field drawn (None: not carried) unless ``fixed`` sets it."""
    values = {"stnd": st.none() | stands, "paxc": st.none() | counts, "gate": st.none() | gates_,
              "maid": st.none() | st.sampled_from(MASTERS) if role in CHILDREN else st.none()}
    return Record(role, **{k: fixed[k] if k in fixed else draw(v) for k, v in values.items()})


VALUES = {"STND": stands, "PAXC": counts, "GTDT": gates_, "MAID": st.sampled_from(MASTERS)}


def rare(draw, model: Model) -> list[list[Op]]:
    """The kinds of message that take the state so far one step further into a rare shape (issue
    52), each a list of the messages of that kind, from the furthest step there is: an ADFT that
    restores a tombstone holding a hidden gate, with a gate, or a FDEL to a master live children
    name but msgx does not hold; else a gate written to a tombstone (a hidden write) or a child's
    record naming a master never stored; else a FDEL to a flight never stored (a tombstone msgx
    makes) or an ADFT with a master's and its child's records (each with its own PAXC: the master's
    own wins, C4). The caller draws a kind, then a message, so a kind with many messages does not
    crowd out the others."""
    tombs = [r for r in ROLES if r in model.flights and model.flights[r].deleted]
    unstored = [r for r in ROLES if r not in model.flights]
    third = [[Op("adft", (record(draw, r, gate=draw(gates_)),)) for r in tombs if "GTDT" in model.flights[r].fields],
             [Op("fdel", role=m) for m in MASTERS if model.live_children(m) and not model.live(m)]]
    second = [[Op("flop", role=r, styp="GTDT", value=draw(gates_))
               for r in tombs if "GTDT" not in model.flights[r].fields],
              [Op("adft", (record(draw, c, maid=m),)) for m in MASTERS if m in unstored for c in CHILDREN]]
    first = [[Op("fdel", role=r) for r in unstored],
             [Op("adft", (record(draw, m), record(draw, c, maid=m))) for m in MASTERS if model.live(m)
              for c in model.live_children(m)]]
    return next(([shapes for shapes in tier if shapes] for tier in (third, second, first) if any(tier)), [])


@st.composite
def ops(draw, model: Model) -> Op:
    """One message, and whether the grouped run drains after it. Half the time it takes the state
    so far one step further into a rare shape (``rare``); otherwise any message: a FLOP sets or
    clears (None) one field, only a child carries MAID."""
    if draw(st.booleans()) and (families := rare(draw, model)):
        # a rare step mostly ends a group: the grouped run then meets the state it left committed
        step = draw(st.sampled_from(draw(st.sampled_from(families))))
        return replace(step, cut=draw(st.sampled_from((True, True, True, False))))
    cut = draw(st.booleans())
    kind = draw(st.sampled_from(KINDS))
    if kind == "flop":
        styp = draw(st.sampled_from(FIELDS))
        role = draw(st.sampled_from(CHILDREN if styp == "MAID" else ROLES))
        return Op("flop", role=role, styp=styp, value=draw(st.none() | VALUES[styp]), cut=cut)
    if kind == "fdel":
        return Op("fdel", role=draw(st.sampled_from(ROLES)), cut=cut)
    return Op(kind, draw(records()), cut=cut)


@st.composite
def sequences(draw) -> list[Op]:
    """Four to ten messages, each drawn with the model's state after those before it."""
    model, sequence = Model(date(2027, 1, 1)), []
    for _ in range(draw(st.integers(min_value=4, max_value=10))):
        sequence.append(op := draw(ops(model)))
        model.apply(op)
    return sequence


# --- the reference model ---------------------------------------------------------------------------
@dataclass
class Flight:
    deleted: bool = False
    fday: date | None = None
    fields: dict[str, str] = field(default_factory=dict)

    def set(self, key: str, value: str | None) -> None:
        if value is None:
            self.fields.pop(key, None)
        else:
            self.fields[key] = value


@dataclass
class Model:
    """The rules the spec and the docs state, applied in mailbox-id order."""

    day: date
    flights: dict[str, Flight] = field(default_factory=dict)     # role -> stored flight
    members: set[str] = field(default_factory=set)               # the day's snapshot members

    def live(self, role: str) -> bool:
        return role in self.flights and not self.flights[role].deleted

    def master_of(self, role: str) -> str | None:
        return self.flights[role].fields.get("MAID") if self.live(role) else None

    def live_children(self, master: str) -> list[str]:
        return sorted(c for c in CHILDREN if self.master_of(c) == master)

    def apply(self, op: Op) -> None:
        getattr(self, op.kind)(op)

    def flop(self, op: Op) -> None:
        """FLOP: set or clear one field; creates a missing flight (fday NULL), writes a deleted
        one's hidden field (F6); a live child passes its shared change on (C4)."""
        before = self._child_view([op.role])
        self.flights.setdefault(op.role, Flight()).set(op.styp, op.value)
        self._pass_on(before, own={})

    def adft(self, op: Op) -> None:
        """ADFT: each record an increment that restores (INV-29, D21); a restored flight of a day
        rejoins its members (L8); children pass on what the master's own record does not carry."""
        roles = [r.role for r in op.records]
        before = self._child_view(roles)
        for record in op.records:
            flight = self.flights.setdefault(record.role, Flight())
            if flight.deleted and flight.fday is not None:
                self.members.add(record.role)
            flight.deleted = False
            for key, value in record.values().items():
                if value is not None:
                    flight.set(key, value)
        own = {r.role: {k for k, v in r.values().items() if v is not None} for r in op.records}
        self._pass_on(before, own)

    def fdel(self, op: Op) -> None:
        """FDEL: the target (a tombstone when missing) and every live child of it (C-25, C3)."""
        for child in self.live_children(op.role):
            self.flights[child].deleted = True
        self.flights.setdefault(op.role, Flight()).deleted = True

    def dnld(self, op: Op) -> None:
        """The day's whole schedule (D1): listed flights written whole with the day and restored
        (S3); live members of the day it leaves out diff-deleted with their live children, except a
        master a listed child names (L5); the members become the package (and those masters)."""
        package = {r.role for r in op.records}
        candidates = {f for f in self.members - package if self.live(f) and self.flights[f].fday == self.day}
        named = {r.maid for r in op.records if r.maid}
        held = candidates & named
        diff = candidates - held
        self.members = package | held
        doomed = diff | {c for m in diff for c in self.live_children(m)} - self.members
        for record in op.records:
            self.flights[record.role] = Flight(False, self.day, {k: v for k, v in record.values().items() if v})
        for role in doomed:
            self.flights[role].deleted = True

    def _child_view(self, roles: list[str]) -> dict[str, tuple[str | None, dict[str, str]]]:
        """Each written flight's master (if a live child) and fields before the message."""
        return {r: (self.master_of(r), dict(self.flights[r].fields)) for r in roles if r in self.flights}

    def _pass_on(self, before: dict[str, tuple[str | None, dict[str, str]]], own: dict[str, set[str]]) -> None:
        """A child that was and stays the live child of one master passes each shared field it
        changed to that master, stored (deleted or not: hidden then), in FLID order, except the
        fields the master's own record in the message carries (decision C4)."""
        for role in sorted(before):
            master, old = before[role]
            if master is None or self.master_of(role) != master or master not in self.flights:
                continue
            new = self.flights[role].fields
            for key in SHARED:
                if new.get(key) != old.get(key) and key not in own.get(master, set()):
                    self.flights[master].set(key, new.get(key))


# --- messages --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Names:
    """An example's own FLIDs and day, so examples share a database without meeting."""

    prefix: str
    day: date

    def flid(self, role: str) -> str:
        return f"{self.prefix}{role}"

    def sodt(self) -> str:
        d = self.day
        return f"{d.day:02d}{_MONTHS[d.month - 1]}{d.year % 100:02d}0800"

    def fltr(self, r: Record) -> str:
        flid = self.flid(r.role)
        parts = [f"<FLID>{flid}</FLID><ALCD>YG</ALCD><FLNO>YG{flid[-6:]}</FLNO><MVIN>D</MVIN>"
                 f"<SODT>{self.sodt()}</SODT><FLTY>W</FLTY><FLIN>D</FLIN><ACFT>733</ACFT>"]
        if r.stnd:
            parts.append(f"<STND>{r.stnd}</STND>")
        if r.paxc:
            parts.append(f"<PAXC>{r.paxc}</PAXC>")
        if r.gate:
            parts.append(f'<GTDT GTNO="1"><GATE>{r.gate}</GATE></GTDT>')
        if r.maid:
            parts.append(f"<MAID>{self.flid(r.maid)}</MAID>")
        return "<FLTR>" + "".join(parts) + "</FLTR>"

    def message(self, op: Op) -> str:
        if op.kind in ("dnld", "adft"):
            body = "".join(self.fltr(r) for r in op.records)
            return envelope("SCHD", op.kind.upper(), f"<SCHD><RECS>{len(op.records)}</RECS>{body}</SCHD>\n")
        flid = self.flid(op.role)
        if op.kind == "fdel":
            return flop("FDEL", flid, "\t\t<FDEL></FDEL>\n")
        if op.styp == "GTDT":
            payload = f'<GTDT GTNO="1"><GATE>{op.value}</GATE></GTDT>' if op.value else '<GTDT GTNO="0"/>'
        else:
            value = self.flid(op.value) if op.styp == "MAID" and op.value else (op.value or "")
            payload = f"<{op.styp}>{value}</{op.styp}>"
        return flop(op.styp, flid, f"\t\t{payload}\n")


def names() -> Names:
    n = next(_examples)
    return Names(f"P{n:05d}", date(2027, 1, 1) + timedelta(days=n))


# --- the run ----------------------------------------------------------------------------------------
def stored(app, n: Names) -> dict[str, tuple[bool, dict[str, str], frozenset[str]]]:
    """role -> (deleted, the model's fields, the MAFL's FLIDs) of each stored flight."""
    flids = {n.flid(r): r for r in ROLES}
    with app.engine.connect() as conn:
        states = FlightRepository(conn).load(flids)
    out = {}
    for flid, state in states.items():
        fields = {k: v for k in ("STND", "PAXC") if isinstance(v := state.get(k), str)}
        if state.entries("GTDT"):
            fields["GTDT"] = state.entries("GTDT")[0]["GATE"]
        if isinstance(maid := state.get("MAID"), str):
            fields["MAID"] = maid.removeprefix(n.prefix)
        mafl = frozenset(e["FLID"].removeprefix(n.prefix) for e in state.entries("MAFL"))
        out[flids[flid]] = (state.deleted, fields, mafl)
    return out


def expected(model: Model) -> dict[str, tuple[bool, dict[str, str], frozenset[str]]]:
    return {r: (f.deleted, dict(f.fields), frozenset(model.live_children(r)) if not f.deleted else frozenset())
            for r, f in model.flights.items()}


def run(app, sequence: list[Op], group: int) -> None:
    """Put the sequence in the mailbox and drain it: one commit per message, drained and checked
    after each (``group`` 1), or grouped, drained and checked where ``cut`` says and at the end. A
    wrong state is caught where it appears, before a later message can cover it."""
    n = names()
    model = Model(n.day)
    ids: list[int] = []
    try:
        for at, op in enumerate(sequence, start=1):
            ids.append(app.mailbox.put(n.message(op)))
            model.apply(op)
            if group == 1 or op.cut or at == len(sequence):
                drain_now(app, group_messages=group)
                agrees(app, n, model, ids, sequence[:at])
    except AssertionError:
        release(app, ids)
        raise


def release(app, ids: list[int]) -> None:
    """End a failed example's open messages as an operator would (D24), so that hypothesis's replay
    and shrinking of it do not wait behind them at the queue head (INV-3) and fail on that."""
    for msg_id in ids:
        skip(app.engine, msg_id, operator="property test", reason="a failed example", now=app.clock.now())


def agrees(app, n: Names, model: Model, ids: list[int], sequence: list[Op]) -> None:
    """Every message so far SUCCEEDED, and the stored flights and members are the model's."""
    statuses = dict(query(app, "SELECT msg_id, status || coalesce(':' || reason, '') FROM proc_state "
                               "WHERE msg_id = ANY(:ids)", ids=ids))
    assert [statuses.get(i) for i in ids] == ["SUCCEEDED"] * len(ids), (sequence, statuses)
    got = {role: (deleted, fields, frozenset() if deleted else mafl)    # a deleted flight's MAFL is not kept
           for role, (deleted, fields, mafl) in stored(app, n).items()}
    assert got == expected(model), sequence
    members = {f.removeprefix(n.prefix) for (f,) in query(app, "SELECT flid FROM schd_gen_flid WHERE fday = :d",
                                                          d=n.day)}
    assert members == model.members, sequence


def _known_bad(test):
    """The three sequences that once wrote wrong state, tried first on every run besides the drawn ones (C2, C3, C4)."""
    family = Op("dnld", (Record("A"), Record("C", maid="A")), cut=True)
    sequences = (
        [Op("fdel", role="C", cut=True), Op("flop", role="C", styp="GTDT", value="G1", cut=True),
         Op("adft", (Record("C", gate="G2"),), cut=True)],
        [Op("adft", (Record("C", maid="A"),), cut=True), Op("fdel", role="A", cut=True)],
        [family, Op("adft", (Record("A", paxc="151"), Record("C", paxc="20", maid="A")), cut=True)],
    )
    for sequence in sequences:
        test = example(sequence)(test)
    return test



@pytest.mark.parametrize("group", [1, 64], ids=["one-message", "grouped"])
def test_flight_state_follows_the_reference_model(app, group):
    """FS §5.4, D1, D2, D21, D30, INV-21, INV-29, C-25, US-05 AC4, S3, L5, L8, decisions C2, C3,
    C4: any sequence of DNLD, ADFT, FDEL and FLOP changes with code-share links leaves the stored
    flights as the reference model says, one commit per message and grouped."""

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None, print_blob=False,
              phases=tuple(p for p in Phase if PINNED or p is not Phase.explicit),
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                     HealthCheck.data_too_large])
    @given(sequences())
    @_known_bad
    def check(sequence: list[Op]) -> None:
        run(app, sequence, group)

    check()
