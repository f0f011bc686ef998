"""The message path: intake registers mailbox rows, the pump takes the queue head in id order,
the protocol decides and writes one message under its unit of work, backfill marks the mailbox.

Two sub-folders hold what makes it fast without changing what it does: ``grouping/`` (group
commit, read-ahead, write-behind, the queue floor) and ``large_bodies/`` (the offload helper
process, the package split, the GC pause). The operator's actions live in ``msgx_engine.operations``.
"""
