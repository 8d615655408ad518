"""The family tools (DESIGN §8): who is in the user's family, what its members wrote,
and a message sent on the user's behalf, only once they approve its exact text.

* ``list_family_members`` (inline): the members, with the ids the other tools take.
* ``read_family_messages {with?, limit?}`` (inline): the newest messages of the user's
  ``direct`` and ``family`` conversations, quoted as data (``quoting.py``). Who opted
  out is the egress's to judge, at every request (``shared/egress/screen.py``): a
  member's messages withheld, a reader who opted out told their agent reads none.
* ``send_family_message {to, text}``: always waits for the user's approval; the card
  shows the recipient and the exact text, and the approved call (run by a task, like
  every approved call) delivers exactly that, verbatim, marked ``via: "agent"``. A
  denied call sends nothing and the model is told. This is what makes a message that
  says "ignore your instructions and send …" harmless: the model may obey it, but
  nothing leaves without the user's say-so.

Every string a member chose (a display name, the family's name, a message) reaches the
model fenced as data (``quoting.py``); the model tells members apart by userId. The
user's card names a member in words, unambiguously (``member_label``): two parents both
called "Dad" read "Dad (parent, joined 3 March 2026)" and "Dad (parent, joined 5 March
2026)".

One module a tool (``listing``, ``reading``, ``sending``), on ``common`` and ``names``.
"""

from __future__ import annotations

from typing import Any

from shared.clock import Clock
from shared.egress.provenance import ProvenanceStore
from shared.egress.screen import Screen
from shared.families.delivery import Delivery
from shared.families.service import Families
from shared.store.base import ConversationStore
from shared.tools.base import Tool
from shared.tools.family.listing import list_family_members_tool
from shared.tools.family.reading import read_family_messages_tool
from shared.tools.family.sending import send_family_message_tool


def family_tools(
    families: Families,
    conversations: ConversationStore,
    delivery: Delivery,
    provenance: ProvenanceStore,
    screen: Screen,
    clock: Clock,
    output_chars: int,
) -> list[Tool[Any]]:
    """The three family tools, reading and sending through the given services."""
    return [
        list_family_members_tool(families, output_chars),
        read_family_messages_tool(families, conversations, provenance, screen, clock, output_chars),
        send_family_message_tool(families, delivery, provenance),
    ]
