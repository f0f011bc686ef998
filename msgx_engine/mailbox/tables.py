"""The shared mailbox tables exactly as ``mailbox-schema.mysql.sql`` (C-14: never altered by us).

Only ``mailbox init`` creates them, and only in a test or demo database.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, Integer, MetaData, SmallInteger, String, Table, Text
from sqlalchemy.dialects import mysql

mailbox_metadata = MetaData()

_MEDIUMTEXT = Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
_TINY = SmallInteger().with_variant(mysql.TINYINT(), "mysql", "mariadb")
_MEDIUMINT = Integer().with_variant(mysql.MEDIUMINT(), "mysql", "mariadb")

cminmsgs = Table(
    "cminmsgs",
    mailbox_metadata,
    Column("CMINMSGS_ID", BigInteger, primary_key=True, autoincrement=True),
    Column("CMINMSGS_CLOB_MSG", _MEDIUMTEXT, nullable=False),
    Column("CMINMSGS_DATE_RECEIVED", DateTime),
    Column("CMINMSGS_DATE_PROCESSED", DateTime),
    Column("CMINMSGS_SUBSYSTEM_NAME", String(4)),
    Column("CMINMSGS_SUBSYSTEM_SEQUENCE", _MEDIUMINT),
    Column("CMINMSGS_SUBSYSTEM_DATE_SENT", DateTime),
    Column("CMINMSGS_SUBSYSTEM_SUBTYPE", String(4)),
    Column("CMINMSGS_SUBSYSTEM_TYPE", String(4)),
    Column("CMINMSGS_STATUS", String(20)),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

coutmsgs = Table(
    "coutmsgs",
    mailbox_metadata,
    Column("COUTMSGS_ID", BigInteger, primary_key=True, autoincrement=True),
    Column("COUTMSGS_CLOB_MSG", _MEDIUMTEXT),
    Column("COUTMSGS_DATE_INSERTED", DateTime, nullable=False),
    Column("COUTMSGS_DATE_SENT", DateTime),
    Column("ROUTINGID", String(23), nullable=False),
    Column("COUTMSGS_TRUEFALS_GROUP", _TINY, nullable=False, server_default="0"),
    Column("COUTMSGS_NO_MESSAGES", _TINY),
    Column("COUTMSGS_GROUP_ORDER", _TINY),
    Column("COUTMSGS_GROUP_ID", SmallInteger),
    Column("COUTMSGS_FINAL_GROUP_IND", _TINY, nullable=False, server_default="0"),
    Column("COUTMSGS_ACK_REQD", _TINY, nullable=False, server_default="0"),
    Column("COUTMSGS_ACK_RESEND_TIMES", _TINY, nullable=False, server_default="0"),
    Column("COUTMSGS_ACK_DATE_RECV", DateTime),
    Column("COUTMSGS_ENCRYPT", _TINY, nullable=False, server_default="0"),
    Column("COUTMSGS_ERROR", _TINY, nullable=False, server_default="0"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)
