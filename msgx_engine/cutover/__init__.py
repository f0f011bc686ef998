"""Cut-over and rollback as commands (OPS-4, PRE-1): ``msgx cutover stop-writes``, ``promote`` and
``rollback`` hand the right to process and mark the mailbox from one installation to another at a
recorded watermark, so that every mailbox row is processed once, marked once and published once,
whichever installation held the right. ``rules`` holds the pure decisions; ``stop``, ``promote`` and
``rollback`` one command each; ``common`` what they share (locks, the other side, the comparison).
"""
