"""The compiled FLTR walk (``_record_walk.c``, P35): ``whole_record``'s pass in C."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lxml import etree

def configure(scalars: Mapping[str, str], keys: Mapping[str, str], groups: Mapping[str, tuple[Any, ...]],
              objects: Mapping[str, tuple[Any, ...]], skipped: str, derived: frozenset[str],
              plain_sequences: Mapping[str, int], sequence_value: Callable[[str], int | None],
              element_type: type[etree._Element], probe: etree._Element) -> None: ...
def fields_many(records: Sequence[etree._Element], frozen: bool) -> list[Mapping[str, Any] | None]: ...
