"""The types the offload helper and the package split share: a message whose body the helper
process took, and the work it promises for it.

``offload`` makes these messages and ``package_split`` reads a package's later records from them;
keeping the type here lets each import it without importing the other (``offload`` runs
``package_split``'s part in the helper process).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from lxml import etree

from msgx_engine.sis.decode import SisMessage, SisRefused


class HelperWork(Protocol):
    """What the helper process answers for one body (``offload.Pending``): its part of a
    package's records, its hash and the verdict of its tree checks."""

    def flights(self) -> object: ...

    def hash_of(self, root: etree._Element) -> str: ...

    def refusal_of(self, root: etree._Element, *, here: bool = False) -> SisRefused | None: ...


@dataclass(frozen=True)
class HandedOver(SisMessage):
    """A message whose body the worker took: its hash and its tree checks come from there. The
    pipeline passes it as the message it is; only ``payload_hash`` and ``refusal`` (which the
    pump asks for) and ``pipeline.large_bodies.package_split`` (a package's later records) read ``pending``."""

    pending: HelperWork = field(kw_only=True, repr=False, compare=False)

    @property
    def payload_hash(self) -> str:
        return self.pending.hash_of(self.root)

    def refusal(self, *, here: bool = False) -> SisRefused | None:
        return self.pending.refusal_of(self.root, here=here)
