"""Durable metric totals (``metric_total``): the counters and histograms ``/metrics`` exports.

A Prometheus counter must never go down. Counted in process memory, a total would restart at zero
with every pump, differ between two ``msgx serve`` instances, and a ``count(*)`` over
``proc_state`` would drop whenever archiving moves rows. So each total is a row here (name plus
its labels as canonical JSON text), and the work it counts adds to it **in the same transaction**
that does the work: the total can neither run ahead of the work (a rolled-back transaction takes
its increment with it) nor lag behind it (a crash after the commit has counted already).

Two ways to add:

- ``terminal_cte`` / ``delivered_cte``: a data-modifying CTE joined to the statement that writes
  the terminal status (``store.queue``) or the delivered mark (``store.outbox``). It groups the
  rows that statement changed by series and upserts the sums: no statement or round trip of its
  own (a group's one status statement counts all of its messages at once), the labels come from
  the changed rows themselves (TYPE, STYP and status as stored), and a statement that is refused
  or rolled back counts nothing.
- ``Deltas`` + ``add``: increments gathered in memory, written with one ``INSERT .. ON CONFLICT``
  per transaction (the request closures, a few a day).

Rows are written in key order, so two writers that touch the same totals lock them in the same
order and cannot deadlock. A histogram is stored as non-cumulative per-bucket counts (label
``le``, ``+Inf`` for the rest) plus ``_sum`` and ``_count`` rows; ``read_totals`` reads them back
and the scrape cumulates them. The table stays small: one row per label combination and bucket.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import orjson
from prometheus_client.utils import floatToGoString
from sqlalchemy import Connection

# --- the series (names as exported; a counter's row carries its ``_total`` name) --------------------
MESSAGES_TERMINAL = "msgx_messages_terminal_total"          # {type, styp, status}
EVENTS_DELIVERED = "msgx_events_delivered_total"            # {topic}
REQUESTS = "msgx_requests_total"                            # {kind, outcome}
TERMINAL_LATENCY = "msgx_message_terminal_latency_seconds"  # registration -> terminal status
DELIVERY_LATENCY = "msgx_event_delivery_latency_seconds"    # event release -> Kafka acknowledgement

# Latency buckets around the processing target (p99 of a few hundred milliseconds) with room
# for the slow tail an operator wants to see (backoffs, outages): up to five minutes.
BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
INF = "+Inf"


def labels_text(labels: Mapping[str, str]) -> str:
    """The canonical JSON text of a label set (sorted keys, no spaces): the key of a row. The
    CTEs below build the same text in SQL (``to_json`` escapes a string the way orjson does)."""
    return orjson.dumps(dict(labels), option=orjson.OPT_SORT_KEYS).decode()


def le_text(bound: float) -> str:
    """A bucket's upper bound as Prometheus writes it (``0.005``, ``1.0``, ``+Inf``)."""
    return floatToGoString(bound)


def bucket_of(seconds: float, buckets: tuple[float, ...] = BUCKETS) -> str:
    """The ``le`` of the smallest bucket that holds ``seconds`` (``+Inf`` past the last)."""
    for bound in buckets:
        if seconds <= bound:
            return le_text(bound)
    return INF


# --- in memory, then one statement ---------------------------------------------------------------
@dataclass
class Deltas:
    """Increments gathered during one transaction, keyed by (name, canonical labels)."""

    values: dict[tuple[str, str], float] = field(default_factory=dict)

    def count(self, name: str, labels: Mapping[str, str] | None = None, by: float = 1.0) -> Deltas:
        key = (name, labels_text(labels or {}))
        self.values[key] = self.values.get(key, 0.0) + by
        return self

    def observe(self, histogram: str, seconds: float) -> Deltas:
        """One observation: its bucket, the sum and the count."""
        seconds = max(seconds, 0.0)
        self.count(f"{histogram}_bucket", {"le": bucket_of(seconds)})
        self.count(f"{histogram}_sum", by=seconds)
        return self.count(f"{histogram}_count")

    def rows(self) -> list[tuple[str, str, float]]:
        """(name, labels, increment) in key order (the lock order of every writer)."""
        return [(name, labels, value) for (name, labels), value in sorted(self.values.items())]

    def __bool__(self) -> bool:
        return bool(self.values)


_UPSERT = ("INSERT INTO metric_total (name, labels, value) {rows} "
           "ON CONFLICT (name, labels) DO UPDATE SET value = metric_total.value + excluded.value")


def add(conn: Connection, deltas: Deltas) -> None:
    """Add ``deltas`` in the caller's transaction: one statement, none when there is nothing."""
    rows = deltas.rows()
    if not rows:
        return
    values = ", ".join(f"(%(n{i})s, %(l{i})s, %(v{i})s)" for i in range(len(rows)))
    params: dict[str, object] = {}
    for i, (name, labels, value) in enumerate(rows):
        params.update({f"n{i}": name, f"l{i}": labels, f"v{i}": value})
    conn.exec_driver_sql(_UPSERT.format(rows=f"VALUES {values}"), params)


# --- as part of the statement that does the work ----------------------------------------------------
def _json_field(key: str, expr: str) -> str:
    return f"'\"{key}\":' || to_json(coalesce({expr}, '')::text)::text"


def _labels_sql(fields: Iterable[tuple[str, str]]) -> str:
    """SQL building ``labels_text`` of {key: expr} (the keys given sorted)."""
    parts = [_json_field(k, e) for k, e in fields]
    return "'{' || " + " || ',' || ".join(parts) + " || '}'"


def _bucket_sql(seconds: str) -> str:
    """The ``le`` labels of the bucket that holds ``seconds`` (float8 literals: no numeric casts)."""
    whens = " ".join(f"WHEN {seconds} <= {bound!r}::float8 THEN '{labels_text({'le': le_text(bound)})}'"
                     for bound in BUCKETS)
    return f"CASE {whens} ELSE '{labels_text({'le': INF})}' END"


def _upsert_cte(alias: str, source: str, counter: str, label_columns: list[tuple[str, str]], histogram: str,
                start: str) -> str:
    """``alias AS (INSERT ..)``: per row of ``source``, one on ``counter`` (labelled by the given
    (label, column) pairs) and one observation of ``histogram`` (seconds from column ``start`` to
    ``%(now)s``). The rows are first grouped by their label columns and bucket, so the label text
    is built once per series, not per row; the totals are written in key order."""
    columns = ", ".join(f"s.{c}" for _, c in label_columns)
    seconds = f"greatest(date_part('epoch', %(now)s::timestamptz - s.{start}), 0)"
    grouped = (f"SELECT {columns}, {_bucket_sql(seconds)} AS le, count(*)::float8 AS n, sum({seconds}) AS secs "
               f"FROM {source} s GROUP BY {columns}, le")
    labels = _labels_sql([(label, f"g.{c}") for label, c in label_columns])
    rows = (f"SELECT k.name, k.labels, sum(k.value) FROM ({grouped}) g CROSS JOIN LATERAL (VALUES "
            f"('{counter}', {labels}, g.n), ('{histogram}_bucket', g.le, g.n), "
            f"('{histogram}_sum', '{{}}', g.secs), ('{histogram}_count', '{{}}', g.n)) "
            "AS k(name, labels, value) GROUP BY k.name, k.labels ORDER BY k.name, k.labels")
    return f"{alias} AS ({_UPSERT.format(rows=rows)})"


def terminal_cte(source: str, alias: str = "mt") -> str:
    """The totals of messages that reached a terminal status: ``source`` returns the rows the
    status statement wrote (``status``, ``msg_type``, ``msg_styp``, ``created_at``); the status
    time is the statement's ``%(now)s``. Latency counts from registration (``created_at``)."""
    labels = [("status", "status"), ("styp", "msg_styp"), ("type", "msg_type")]
    return _upsert_cte(alias, source, MESSAGES_TERMINAL, labels, TERMINAL_LATENCY, "created_at")


def delivered_cte(source: str, alias: str = "md") -> str:
    """The totals of outbox events acknowledged by Kafka: ``source`` returns the events the mark
    statement wrote (``topic``, ``released_at``); the acknowledgement time is ``%(now)s``."""
    return _upsert_cte(alias, source, EVENTS_DELIVERED, [("topic", "topic")], DELIVERY_LATENCY, "released_at")


# --- reading (the scrape) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Total:
    name: str
    labels: dict[str, str]
    value: float


def read_totals(conn: Connection) -> list[Total]:
    """Every stored total, in key order."""
    rows = conn.exec_driver_sql("SELECT name, labels, value FROM metric_total ORDER BY name, labels")
    return [Total(name, orjson.loads(labels), float(value)) for name, labels, value in rows]
