"""Speed machinery for large messages (a 10,000-flight daily schedule is a 10 MB body): a
helper process hashes, checks and extracts part of the body on the second core (``offload``,
``package_split``, their shared message type in ``handover``), and the garbage collector waits
while the pump works through it (``gc_pause``). Without the helper the pump does the same work
itself."""
