"""A demo airport day: the SIS messages an AODB would send for one operating day, from a seed.

Pure: message bodies from a seed and a date, nothing read but the package's own sample files
(public SIS samples in ``samples/``, used as record templates) and nothing written. The same seed
gives the same messages, the same counts and the same verdicts on any day; the date only moves
the times and the flight ids.

The day, in mailbox order:

1. reference data: a DNLD for each of nine reference types (airbridges with the stands they
   serve, gates, stands, belts, check-in desks, terminals, airlines, airports, aircraft types),
   each built on the record shape of its public sample;
2. the daily snapshot: one SCHD DNLD of every flight of the day (arrival/departure rotations,
   a code-share child of one departure);
3. the operational stream in event-time order: stand plans, estimates, actuals, gates and gate
   changes, check-in desks, baggage belts, boarding, delays, cancellations, one diversion, the
   code-share master's MAFL, one FDEL;
4. deliberate trouble mixed into the stream: malformed bodies (DEAD), verbatim repeats
   (SKIPPED duplicate), a reused identity with other content (SKIPPED identity_conflict), load
   messages the default ignore list drops, a type nobody handles (SKIPPED unsupported), and one
   cancellation the demo's database refuses until an operator fixes it (``DemoFault``: DEAD
   after its retries, then replayed; ``demo.fault`` stages it).

Time: actual times (ACTT) are only given where they have happened. With ``now`` (the airport's
local time when the demo starts) a flight whose actual time is still ahead has estimates, gates,
stands and desks but no actual, so the day looks like a day in progress; without it every
flight has flown (a past day, and what the tests of determinism use).

Each message carries the verdict the current engine gives it, so the demo and its tests can
check every one.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from importlib import resources

from lxml import etree

from msgx_engine.sis.decode import parse_xml
from msgx_engine.sis.times import dttm, sis_time

DEFAULT_SEED = 20260425
HOME = "CTU"                       # the demo airport (Chengdu); SIS times are its local time
ROTATIONS = 120                    # arrival + departure pairs: 240 flights in the snapshot

# The verdicts, as (proc_state.status, reason) in the words of DESIGN §4; spelled out here because
# the generator is pure and imports only sis (the store's Status enum has the same values).
SUCCEEDED = ("SUCCEEDED", None)
DUPLICATE = ("SKIPPED", "duplicate")
CONFLICT = ("SKIPPED", "identity_conflict")
IGNORED_LDM = ("SKIPPED", "ignored:LDM-*")
UNSUPPORTED = ("SKIPPED", "unsupported")
MALFORMED = ("DEAD", "malformed")
EXHAUSTED = ("DEAD", "exhausted")        # the staged fault: retried, then dead; replayable once fixed


@dataclass(frozen=True)
class DemoMessage:
    """One mailbox body and the (status, reason) the engine gives it."""

    kind: str                      # TYPE/STYP as a reader would name it, e.g. "FLOP/GTDT"
    body: str
    expect: tuple[str, str | None]
    flid: str | None = None


@dataclass(frozen=True)
class DemoFault:
    """The failure the demo rehearses: the cancellation of one departure, which the demo's state
    database refuses (``demo.fault`` installs the refusal) until the operator's fix step. The
    message is retried, ends DEAD(exhausted), and is replayed after the fix. It is the last
    message of its flight, so nothing later has changed the flight when it is replayed."""

    index: int                     # position in ``DemoDay.messages`` (mailbox id - 1 on a fresh mailbox)
    flid: str
    flno: str


@dataclass(frozen=True)
class DemoDay:
    day: date
    seed: int
    messages: tuple[DemoMessage, ...]
    flights: tuple[str, ...]       # FLIDs `msgx flights` lists when the day is processed
    examples: tuple[str, ...]      # three flights worth printing: delayed, diverted, code-share master
    snapshot_size: int             # flights in the SCHD DNLD (the deleted one and the code-share child too)
    fault: DemoFault | None = None
    now: datetime | None = None    # actual times are given up to this (local) time; None: all flown

    def expected_statuses(self) -> Counter[str]:
        return Counter(m.expect[0] for m in self.messages)

    def expected_outcomes(self) -> Counter[tuple[str, str | None]]:
        return Counter(m.expect for m in self.messages)

    def kinds(self) -> Counter[str]:
        return Counter(m.kind for m in self.messages)

    def describe(self) -> str:
        kinds = self.kinds()
        flop = sum(n for k, n in kinds.items() if k.startswith("FLOP/"))
        ref = sum(n for k, n in kinds.items() if k.endswith("/DNLD") and k != "SCHD/DNLD")
        other = len(self.messages) - flop - ref - kinds["SCHD/DNLD"]
        return (f"{ref} reference-data DNLDs, a SCHD DNLD of {self.snapshot_size} flights, {flop} FLOP "
                f"messages, {other} others (ignored and unknown types)")


# --- formats -----------------------------------------------------------------------------------
def envelope(mtype: str, styp: str, seqn: int, at: datetime, body: str) -> str:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<MSG>\n\t<META>\n\t\t<SNDR>AODB</SNDR>\n'
            f"\t\t<SEQN>{seqn}</SEQN>\n\t\t<DTTM>{dttm(at)}</DTTM>\n\t\t<TYPE>{mtype}</TYPE>\n"
            f"\t\t<STYP>{styp}</STYP>\n\t</META>\n{body}</MSG>\n")


# --- the airport ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Carrier:
    code: str
    icao: str
    name: str
    name_cn: str
    base: int                      # first flight number of its block
    international: bool = False


CARRIERS = (
    Carrier("3U", "CSC", "SICHUAN AIRLINES", "四川航空", 8601),
    Carrier("CA", "CCA", "AIR CHINA", "中国国际航空", 4101),
    Carrier("MU", "CES", "CHINA EASTERN AIRLINES", "中国东方航空", 5401),
    Carrier("CZ", "CSN", "CHINA SOUTHERN AIRLINES", "中国南方航空", 3401),
    Carrier("EU", "UEA", "CHENGDU AIRLINES", "成都航空", 2201),
    Carrier("HU", "CHH", "HAINAN AIRLINES", "海南航空", 7301),
    Carrier("ZH", "CSZ", "SHENZHEN AIRLINES", "深圳航空", 9401),
    Carrier("CX", "CPA", "CATHAY PACIFIC", "国泰航空", 341, True),     # CX, UA, AA: in the AIRL sample
    Carrier("UA", "UAL", "UNITED AIRLINES", "美国联合航空", 851, True),
)
_CARRIER_WEIGHTS = (30, 20, 14, 12, 8, 6, 4, 4, 2)
DOMESTIC = ("PEK", "SHA", "PVG", "CAN", "SZX", "KMG", "XIY", "HGH", "LXA", "URC", "WUH", "XMN")
FOREIGN = {"CX": ("HKG",), "UA": ("SFO",)}
AIRPORTS = {
    "PVG": ("ZSPD", "SHANGHAI PUDONG INTL AIRPORT", "上海浦东国际机场", "PRC", "D"),
    "CAN": ("ZGGG", "GUANGZHOU BAIYUN INTL AIRPORT", "广州白云国际机场", "PRC", "D"),
    "SZX": ("ZGSZ", "SHENZHEN BAOAN INTL AIRPORT", "深圳宝安国际机场", "PRC", "D"),
    "KMG": ("ZPPP", "KUNMING CHANGSHUI INTL AIRPORT", "昆明长水国际机场", "PRC", "D"),
    "XIY": ("ZLXY", "XIAN XIANYANG INTL AIRPORT", "西安咸阳国际机场", "PRC", "D"),
    "HGH": ("ZSHC", "HANGZHOU XIAOSHAN INTL AIRPORT", "杭州萧山国际机场", "PRC", "D"),
    "LXA": ("ZULS", "LHASA GONGGAR AIRPORT", "拉萨贡嘎机场", "PRC", "D"),
    "URC": ("ZWWW", "URUMQI DIWOPU INTL AIRPORT", "乌鲁木齐地窝堡国际机场", "PRC", "D"),
    "WUH": ("ZHHH", "WUHAN TIANHE INTL AIRPORT", "武汉天河国际机场", "PRC", "D"),
    "XMN": ("ZSAM", "XIAMEN GAOQI INTL AIRPORT", "厦门高崎国际机场", "PRC", "D"),
    "CKG": ("ZUCK", "CHONGQING JIANGBEI INTL AIRPORT", "重庆江北国际机场", "PRC", "D"),
    "CTU": ("ZUUU", "CHENGDU SHUANGLIU INTL AIRPORT", "成都双流国际机场", "PRC", "D"),
    "HKG": ("VHHH", "HONG KONG INTL AIRPORT", "香港国际机场", "HKG", "I"),
    "SFO": ("KSFO", "SAN FRANCISCO INTL AIRPORT", "旧金山国际机场", "USA", "I"),
}                                  # SHA and PEK come with the ARPT sample
AIRCRAFT = (("320", "A320", 180), ("321", "A321", 220), ("319", "A319", 128), ("738", "B737-800", 189),
            ("330", "A330", 300), ("789", "B787-9", 290))
NEAR_STANDS = tuple(f"{n}" for n in range(101, 131))     # at the terminal, served by airbridges
REMOTE_STANDS = tuple(f"{n}" for n in range(201, 231))
BELTS = tuple(f"B{n:02d}" for n in range(1, 13))
DESKS = tuple(f"C{n:02d}" for n in range(1, 61))
DELAY_CODES = (("81", "ATC FLOW CONTROL"), ("93", "LATE INBOUND AIRCRAFT"), ("71", "WEATHER AT DEPARTURE"),
               ("63", "LATE CREW BOARDING"), ("41", "AIRCRAFT DEFECT"))


def gate_of(stand: str) -> str:
    """Near stand 1xx boards through gate G0x..G30 (one per stand); remote stands bus from G4x."""
    n = int(stand)
    return f"G{n - 100:02d}" if n < 200 else f"G{41 + n % 10}"


def airbridges_of(stand: str) -> list[str]:
    """Every near stand has its own airbridge; the wide-body stands 101-106 have two."""
    n = int(stand)
    if n >= 200:
        return []
    return [f"{n}A", f"{n}B"] if n <= 106 else [f"{n}A"]


# --- flights -------------------------------------------------------------------------------------
@dataclass
class Flight:
    flid: str
    carrier: Carrier
    flno: str
    mvin: str                      # A arrival, D departure
    sodt: datetime
    other_end: str                 # origin of an arrival, destination of a departure
    acft: str
    reno: str
    stand: str
    delay: int = 0                 # minutes, decided up front so estimates and actuals agree
    maid: str | None = None        # code-share child: its master's FLID

    @property
    def flin(self) -> str:
        return "I" if self.carrier.international else "D"

    @property
    def terminal(self) -> str:
        return "T2" if self.carrier.international else "T1"

    @property
    def ffid(self) -> str:
        return f"{self.carrier.code}-{self.flno}-{self.mvin}-{sis_time(self.sodt)}-{self.flin}"


def _delay(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.62:
        return rng.randint(-8, 9)
    if roll < 0.9:
        return rng.randint(15, 55)
    return rng.randint(60, 150)


def plan_flights(day: date, rng: random.Random) -> list[tuple[Flight, Flight]]:
    """ROTATIONS arrival/departure pairs on one aircraft and stand, spread over the day."""
    base = datetime.combine(day, time(5, 30))
    prefix = day.strftime("%y%m%d")
    rotations: list[tuple[Flight, Flight]] = []
    used: dict[str, list[tuple[datetime, datetime]]] = {}
    for i in range(ROTATIONS):
        carrier = rng.choices(CARRIERS, weights=_CARRIER_WEIGHTS)[0]
        arrive = base + timedelta(minutes=5 * rng.randrange(0, 12 * 16 + 6))      # 05:30 .. 21:55
        turn = rng.choice((45, 55, 60, 70, 80, 95, 110))
        depart = arrive + timedelta(minutes=turn)
        acft = rng.choice(AIRCRAFT[4:] if carrier.international else AIRCRAFT[:4])[0]
        stand = _free_stand(rng, used, arrive, depart, wide=acft in ("330", "789"))
        number = carrier.base + 2 * sum(1 for a, _ in rotations if a.carrier is carrier)
        origin = rng.choice(FOREIGN.get(carrier.code, DOMESTIC))
        dest = rng.choice(FOREIGN.get(carrier.code, DOMESTIC))
        reno = f"B{rng.randrange(1000, 9999)}" if not carrier.international else f"N{rng.randrange(100, 999)}UA" \
            if carrier.code == "UA" else f"B-H{chr(65 + rng.randrange(26))}{chr(65 + rng.randrange(26))}"
        a = Flight(f"{prefix}{2 * i + 1:04d}", carrier, f"{carrier.code}{number}", "A", arrive, origin, acft,
                   reno, stand, delay=_delay(rng))
        d = Flight(f"{prefix}{2 * i + 2:04d}", carrier, f"{carrier.code}{number + 1}", "D", depart, dest, acft,
                   reno, stand, delay=max(0, a.delay - (turn - 40)) + max(0, _delay(rng)))
        rotations.append((a, d))
    return rotations


def _free_stand(rng: random.Random, used: dict[str, list[tuple[datetime, datetime]]], start: datetime,
                end: datetime, *, wide: bool) -> str:
    """A stand free over [start - 15 min, end + 15 min]: near stands first, remote when full."""
    pool = NEAR_STANDS[:6] if wide else NEAR_STANDS[6:]
    options = [*rng.sample(pool, len(pool)), *rng.sample(REMOTE_STANDS, len(REMOTE_STANDS))]
    lo, hi = start - timedelta(minutes=15), end + timedelta(minutes=15)
    for stand in options:
        if all(hi <= s or lo >= e for s, e in used.get(stand, [])):
            used.setdefault(stand, []).append((lo, hi))
            return stand
    raise AssertionError("the demo day has more rotations than stands")


# --- reference data (templates from the public samples) ---------------------------------------------
def _sample(name: str) -> etree._Element:
    text = resources.files("msgx_engine.demo").joinpath("samples", name).read_bytes()
    return parse_xml(text)


def _record(template: etree._Element, values: dict[str, str | list[str]]) -> etree._Element:
    """A copy of ``template`` with the named children set; a list value repeats that child."""
    rec = copy.deepcopy(template)
    for tag, value in values.items():
        olds = rec.findall(tag)
        assert olds, f"{template.tag} sample has no <{tag}>"
        anchor = rec.index(olds[0])
        for old in olds:
            rec.remove(old)
        for offset, text in enumerate(value if isinstance(value, list) else [value]):
            el = copy.deepcopy(olds[0])
            el.text = text
            rec.insert(anchor + offset, el)
    return rec


def reference_dnld(rtype: str, seqn: int, at: datetime, records: Iterable[dict[str, str | list[str]]], *,
                   keep_sample_records: bool = False) -> str:
    """A DNLD of ``rtype`` in its sample's shape: the sample's first record is the template."""
    root = _sample(f"{rtype}_01_DNLD.xml")
    samples = root.findall(rtype)
    template = samples[0]
    for rec in samples:
        root.remove(rec)
    built = [*(samples if keep_sample_records else []), *(_record(template, v) for v in records)]
    for rec in built:
        rec.tail = "\n\t"
        root.append(rec)
    meta = root.find("META")
    assert meta is not None
    meta.find("SEQN").text = str(seqn)
    meta.find("DTTM").text = dttm(at)
    root.find("RECS").text = str(len(built))
    root.attrib.clear()
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + etree.tostring(root, encoding="unicode") + "\n"


def reference_day(seqn: Callable[[], int], at: datetime) -> list[DemoMessage]:
    """Nine reference categories consistent with the flights: stands, their airbridges and gates,
    belts, desks, terminals, airlines, airports, aircraft types."""
    stands = [*NEAR_STANDS, *REMOTE_STANDS]
    packages: dict[str, list[dict[str, str | list[str]]]] = {
        "TLST": [{"TCOD": t, "TNAM": f"TERMINAL {t}", "TNMC": f"{t}航站楼", "TCAT": c, "TPAX": "Y"}
                 for t, c in (("T1", "D"), ("T2", "I"))],
        "SLST": [{"SCOD": s, "STNM": f"{'Contact' if s < '200' else 'Remote'} stand {s}",
                  "SNMC": f"{'近' if s < '200' else '远'}机位{s}", "STGP": "T1" if s < "200" else "APRON",
                  "STML": "T2" if s in NEAR_STANDS[:6] else "T1", "REMT": "N" if s < "200" else "Y"}
                 for s in stands],
        "ABDG": [{"ABCD": ab, "DESC": f"Airbridge {ab}", "CDSC": f"登机桥 {ab}",
                  "ATML": "T2" if s in NEAR_STANDS[:6] else "T1", "STND": [s], "GATE": [gate_of(s)],
                  "AMNO": "1"} for s in NEAR_STANDS for ab in airbridges_of(s)],
        "GLST": [{"GCOD": g, "GTNM": f"Gate {g}", "GNMC": f"{g}号登机口", "GCAT": "I" if g <= "G06" else "D",
                  "GTML": "T2" if g <= "G06" else "T1", "PIER": "B" if g >= "G41" else "A"}
                 for g in sorted({gate_of(s) for s in stands})],
        "BLST": [{"BCOD": b, "BTNM": f"Belt {b}", "BNMC": f"行李转盘{b}", "BCAT": "I" if b >= "B11" else "D",
                  "BTML": "T2" if b >= "B11" else "T1"} for b in BELTS],
        "CLST": [{"CCOD": c, "CTNM": f"Desk {c[1:]}", "CNMC": f"值机柜台{c[1:]}", "CCAT": "I" if c > "C50" else "D",
                  "CTML": "T2" if c > "C50" else "T1", "CTRA": "N"} for c in DESKS],
        "AIRL": [{"ITOP": c.code, "ICOP": c.icao, "ONAM": c.name, "ONMC": c.name_cn, "CTRY": "PRC",
                  "DORI": "D"} for c in CARRIERS if not c.international],
        "ARPT": [{"ITCD": k, "ICCD": v[0], "ANAM": v[1], "ANMC": v[2], "CTRY": v[3], "ACTY": k, "ATYP": v[4],
                  "HAUL": "L" if v[4] == "I" else "S"} for k, v in AIRPORTS.items()],
        "AIRC": [{"ITAT": i, "ICAT": c, "DESC": c, "CDSC": f"{c}中文", "MAXP": str(p)}
                 for i, c, p in AIRCRAFT if i not in ("320",)],
    }
    keep = {"AIRL", "ARPT", "AIRC"}       # their samples hold real records worth keeping (UA, AA, CX; SHA, PEK ...)
    return [DemoMessage(f"{rtype}/DNLD", reference_dnld(rtype, seqn(), at, recs, keep_sample_records=rtype in keep),
                        SUCCEEDED) for rtype, recs in packages.items()]


# --- the snapshot ------------------------------------------------------------------------------------
def fltr(f: Flight) -> str:
    t = f.sodt
    route = (f'<ROUT RTNO="1"><APCD>{f.other_end}</APCD><SCDT>{sis_time(t - timedelta(minutes=150))}</SCDT></ROUT>'
             if f.mvin == "A" else
             f'<ROUT RTNO="1"><APCD>{f.other_end}</APCD><SCAT>{sis_time(t + timedelta(minutes=150))}</SCAT></ROUT>')
    on, off = (t - timedelta(minutes=10), t + timedelta(minutes=60)) if f.mvin == "A" else \
        (t - timedelta(minutes=60), t + timedelta(minutes=10))
    parts = [f"<FLID>{f.flid}</FLID><ALCD>{f.carrier.code}</ALCD><FLNO>{f.flno}</FLNO><MVIN>{f.mvin}</MVIN>"
             f"<SODT>{sis_time(t)}</SODT><FLTY>P</FLTY><FLIN>{f.flin}</FLIN>{route}<ACFT>{f.acft}</ACFT>"
             f"<RENO>{f.reno}</RENO><TRML>{f.terminal}</TRML><STND>{f.stand}</STND>"
             f'<PSDT PSNO="1"><PSST>{f.stand}</PSST><STST>{sis_time(on)}</STST><STET>{sis_time(off)}</STET></PSDT>']
    if f.maid:
        parts.append(f"<MAID>{f.maid}</MAID>")
    return "<FLTR>" + "".join(parts) + "</FLTR>"


def snapshot(flights: list[Flight], seqn: int, at: datetime) -> DemoMessage:
    body = f"\t<SCHD><RECS>{len(flights)}</RECS>{''.join(fltr(f) for f in flights)}</SCHD>\n"
    return DemoMessage("SCHD/DNLD", envelope("SCHD", "DNLD", seqn, at, body), SUCCEEDED)


# --- the operational stream ----------------------------------------------------------------------------
@dataclass(order=True)
class Event:
    at: datetime
    order: int
    styp: str = field(compare=False)
    flight: Flight = field(compare=False)
    payload: str = field(compare=False)
    expect: tuple[str, str | None] = field(compare=False, default=SUCCEEDED)


def flop_body(f: Flight, payload: str) -> str:
    return f"\t<FLOP>\n\t\t<FLID>{f.flid}</FLID>\n\t\t<FFID>{f.ffid}</FFID>\n{payload}\t</FLOP>\n"


class Stream:
    """Collects events; their event time orders the mailbox (ties keep insertion order)."""

    def __init__(self, day: date, now: datetime | None = None) -> None:
        self.events: list[Event] = []
        self.earliest = datetime.combine(day, time(3, 5))
        self.now = now

    def add(self, at: datetime, styp: str, flight: Flight, payload: str,
            expect: tuple[str, str | None] = SUCCEEDED) -> None:
        self.events.append(Event(max(at, self.earliest), len(self.events), styp, flight, payload, expect))

    def happened(self, at: datetime) -> bool:
        """Whether an actual at ``at`` has happened yet (always, for a day without ``now``)."""
        return self.now is None or at <= self.now


def _t(at: datetime) -> str:
    return sis_time(at)


def arrival_events(s: Stream, f: Flight, rng: random.Random, *, diverted_to: str | None = None) -> None:
    t, late = f.sodt, f.delay
    eta = t + timedelta(minutes=late)
    s.add(t - timedelta(minutes=150), "ESTT", f, f"\t\t<ESTT>{_t(t + timedelta(minutes=late // 2))}</ESTT>\n")
    if abs(late) >= 15:
        s.add(t - timedelta(minutes=60), "ESTT", f, f"\t\t<ESTT>{_t(eta)}</ESTT>\n")
    if diverted_to:
        s.add(t - timedelta(minutes=20), "FDIV", f, f'\t\t<FDIV DDES="{diverted_to}" DDIR="TO">WEATHER BELOW MINIMA'
                                                    f"</FDIV>\n")
        return
    if rng.random() < 0.18:          # stand plan changed on the day: a second PSDT
        s.add(t - timedelta(minutes=90), "PSDT", f, _psdt(f, eta))
    s.add(eta - timedelta(minutes=12), "STND", f, f"\t\t<STND>{f.stand}</STND>\n")
    if s.happened(eta):
        s.add(eta, "ACTT", f, f"\t\t<ACTT>{_t(eta)}</ACTT>\n")
    belt = BELTS[(int(f.flid[-3:]) * 7) % (10 if f.flin == "D" else 2) + (0 if f.flin == "D" else 10)]
    s.add(eta + timedelta(minutes=8), "CLDT", f,
          f'\t\t<CLDT CLNO="1">\n\t\t\t<BELT>{belt}</BELT>\n\t\t\t<BCLS>X</BCLS>\n'
          f"\t\t\t<PCOT>{_t(eta + timedelta(minutes=15))}</PCOT>\n\t\t\t<PCCT>{_t(eta + timedelta(minutes=55))}"
          f"</PCCT>\n\t\t\t<BTYP>{f.flin}</BTYP>\n\t\t</CLDT>\n")
    if late >= 15:
        s.add(eta + timedelta(minutes=1), "DELY", f, _dely(rng, t, late))


def _psdt(f: Flight, eta: datetime) -> str:
    on, off = (eta - timedelta(minutes=10), eta + timedelta(minutes=60)) if f.mvin == "A" else \
        (eta - timedelta(minutes=60), eta + timedelta(minutes=10))
    return (f'\t\t<PSDT PSNO="1">\n\t\t\t<PSST>{f.stand}</PSST>\n\t\t\t<STST>{_t(on)}</STST>\n'
            f"\t\t\t<STET>{_t(off)}</STET>\n\t\t</PSDT>\n")


def _dely(rng: random.Random, t: datetime, late: int) -> str:
    code, text = rng.choice(DELAY_CODES)
    return f'\t\t<DELY CODE="{code}" STRT="{_t(t)}" DURA="{late // 60:02d}{late % 60:02d}">{text}</DELY>\n'


def _gtdt(gate: str, t: datetime, flin: str) -> str:
    return (f'\t\t<GTDT GTNO="1">\n\t\t\t<GATE>{gate}</GATE>\n\t\t\t<PGOT>{_t(t - timedelta(minutes=45))}</PGOT>\n'
            f"\t\t\t<PGCT>{_t(t - timedelta(minutes=15))}</PGCT>\n\t\t\t<GTYP>{flin}</GTYP>\n\t\t</GTDT>\n")


def departure_events(s: Stream, f: Flight, rng: random.Random, *, cancelled: bool = False,
                     deleted: bool = False) -> None:
    t, late = f.sodt, f.delay
    etd = t + timedelta(minutes=late)
    gate = gate_of(f.stand)
    s.add(t - timedelta(minutes=240), "GTDT", f, _gtdt(gate, t, f.flin))
    if deleted:
        s.add(t - timedelta(minutes=200), "FDEL", f, "\t\t<FDEL></FDEL>\n")
        return
    first = (int(f.flid[-3:]) * 3) % (50 if f.flin == "D" else 8) + (0 if f.flin == "D" else 50)
    desks = "".join(f'\t\t<CKDT CKNO="{n + 1}">\n\t\t\t<CHKC>{DESKS[first + n]}</CHKC>\n\t\t\t<CCLS>X</CCLS>\n'
                    f"\t\t\t<PCOT>{_t(t - timedelta(minutes=150))}</PCOT>\n\t\t\t<PCCT>"
                    f"{_t(t - timedelta(minutes=40))}</PCCT>\n\t\t\t<CTYP>{f.flin}</CTYP>\n\t\t</CKDT>\n"
                    for n in range(rng.choice((2, 3, 3, 4))))
    s.add(t - timedelta(minutes=180), "CKDT", f, desks)
    if cancelled:
        s.add(t - timedelta(minutes=120), "CNCL", f, f"\t\t<CNCL>{_t(t - timedelta(minutes=120))}</CNCL>\n")
        return
    if rng.random() < 0.12:           # gate change
        other = gate_of(rng.choice(REMOTE_STANDS)) if gate < "G41" else f"G{rng.randrange(7, 31):02d}"
        s.add(t - timedelta(minutes=90), "GTDT", f, _gtdt(other, etd, f.flin))
    if late >= 10:
        s.add(t - timedelta(minutes=60), "ESTT", f, f"\t\t<ESTT>{_t(etd)}</ESTT>\n")
    s.add(etd - timedelta(minutes=40), "BOTM", f, f"\t\t<BOTM>{_t(etd - timedelta(minutes=40))}</BOTM>\n")
    if late >= 15:
        s.add(etd - timedelta(minutes=5), "DELY", f, _dely(rng, t, late))
    sent = etd + timedelta(minutes=rng.randint(0, 4))       # drawn either way: the same seed, the same day
    if s.happened(etd):
        s.add(sent, "ACTT", f, f"\t\t<ACTT>{_t(etd)}</ACTT>\n")


# --- deliberate trouble ---------------------------------------------------------------------------------
def malformed_events(s: Stream, flights: list[Flight], rng: random.Random) -> None:
    """Four bodies the engine must dead-letter (MALFORMED) without touching the flight."""
    a, b, c, d = rng.sample(flights, 4)
    s.add(a.sodt - timedelta(minutes=100), "GTDT", a,       # "0" mixed with real entries (D7, empty elements clear)
          '\t\t<GTDT GTNO="0"/>\n' + _gtdt("G99", a.sodt, a.flin), MALFORMED)
    s.add(b.sodt - timedelta(minutes=70), "STND", b, f"\t\t<STND>{b.stand}</STND>\n\t\t<STNX>1</STNX>\n",
          MALFORMED)                                          # an element the catalogue does not know
    s.add(c.sodt - timedelta(minutes=50), "FDIV", c, "", MALFORMED)      # the FDIV sample with DDIR="TOO"
    s.add(d.sodt - timedelta(minutes=30), "ESTT", d, "", MALFORMED)      # cut off mid-body


def _fdiv_sample(f: Flight, seqn: int, at: datetime) -> str:
    root = _sample("FDIV_03_FDIV.xml")
    root.find("META/SEQN").text = str(seqn)
    root.find("META/DTTM").text = dttm(at)
    root.find("FLOP/FLID").text = f.flid
    root.find("FLOP/FFID").text = f.ffid
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + etree.tostring(root, encoding="unicode") + "\n"


# --- the day ------------------------------------------------------------------------------------------
def demo_day(day: date, seed: int = DEFAULT_SEED, now: datetime | None = None) -> DemoDay:
    """Every message of the demo day, in mailbox order, with the verdict each one gets; ``now``
    (naive, the airport's local time) cuts the actual times off where they have not happened."""
    rng = random.Random(seed)
    counter = iter(range(200000 + rng.randrange(100000), 999999))
    seqn = counter.__next__
    start = datetime.combine(day, time(2, 0))
    messages = reference_day(seqn, start)

    rotations = plan_flights(day, rng)
    arrivals = [a for a, _ in rotations]
    departures = [d for _, d in rotations]
    special = rng.sample(range(ROTATIONS), 8)
    diverted, cancelled, deleted, master = (special[0], special[1:4], special[4], special[5])
    arrivals_by_delay = sorted(arrivals, key=lambda f: (-f.delay, f.flid))
    m = departures[master]
    child = Flight(f"{day.strftime('%y%m%d')}9001", CARRIERS[6], f"ZH{m.flno[2:]}", "D", m.sodt, m.other_end,
                   m.acft, m.reno, m.stand, delay=m.delay, maid=m.flid)
    flights = [f for pair in rotations for f in pair] + [child]
    messages.append(snapshot(flights, seqn(), start + timedelta(hours=1)))

    s = Stream(day, now)
    for i, (a, d) in enumerate(rotations):
        arrival_events(s, a, rng, diverted_to="CKG" if i == diverted else None)
        departure_events(s, d, rng, cancelled=i in cancelled or i == diverted, deleted=i == deleted)
    s.add(m.sodt - timedelta(minutes=300), "MAFL", m,
          f"\t\t<MAFL><FLID>{child.flid}</FLID><ALCD>{child.carrier.code}</ALCD><FLNO>{child.flno}</FLNO></MAFL>\n")
    malformed_events(s, [f for f in arrivals if f.delay < 15], rng)
    events = sorted(s.events)

    faulted = departures[cancelled[0]]
    stream: list[DemoMessage] = []
    for ev in events:
        n = seqn()
        if ev.styp == "CNCL" and ev.flight is faulted:
            ev.expect = EXHAUSTED
        if ev.styp == "FDIV" and ev.expect == MALFORMED:
            body = _fdiv_sample(ev.flight, n, ev.at)
        else:
            body = envelope("FLOP", ev.styp, n, ev.at, flop_body(ev.flight, ev.payload))
            if ev.expect == MALFORMED and not ev.payload:
                body = body[: len(body) // 2]
        stream.append(DemoMessage(f"FLOP/{ev.styp}", body, ev.expect, ev.flight.flid))
    messages.extend(_with_trouble(stream, rng, seqn, day))
    live = sorted(f.flid for f in flights if f.maid is None and f is not departures[deleted])
    examples = (arrivals_by_delay[0].flid, arrivals[diverted].flid, m.flid)
    fault = DemoFault(next(i for i, msg in enumerate(messages) if msg.expect == EXHAUSTED), faulted.flid,
                      faulted.flno)
    return DemoDay(day, seed, tuple(messages), tuple(live), examples, len(flights), fault, now)


def _with_trouble(stream: list[DemoMessage], rng: random.Random, seqn: Callable[[], int],
                  day: date) -> list[DemoMessage]:
    """Repeats, a reused identity, load messages and an unknown type, at seeded places."""
    out = list(stream)
    good = [i for i, m in enumerate(stream) if m.expect == SUCCEEDED]
    picks = sorted(rng.sample(good[:-40], 4))
    for i in reversed(picks[:3]):                         # the AODB sends the same message again
        original = stream[i]
        out.insert(i + 1 + 3 * (i % 5), DemoMessage(original.kind, original.body, DUPLICATE, original.flid))
    original = stream[picks[3]]                           # same SNDR|TYPE|STYP|SEQN, other content
    changed = original.body.replace("<FFID>", "<FFID>X", 1)
    out.insert(picks[3] + 20, DemoMessage(original.kind, changed, CONFLICT, original.flid))
    noon = datetime.combine(day, time(12, 0))
    for k in range(2):                                    # load messages: ignored by default (US-04)
        body = envelope("LDM", "UPD", seqn(), noon + timedelta(hours=k),
                        "\t<LDM>\n\t\t<TEXT>LDM CA4101/25.B6543.C8Y150.2/4</TEXT>\n\t</LDM>\n")
        out.insert(len(out) // 3 * (k + 1), DemoMessage("LDM/UPD", body, IGNORED_LDM))
    body = envelope("WXRP", "UPD", seqn(), noon, "\t<WXRP>\n\t\t<TEXT>METAR ZUUU 250400Z 01002MPS</TEXT>\n\t</WXRP>\n")
    out.insert(len(out) // 2, DemoMessage("WXRP/UPD", body, UNSUPPORTED))
    return out
