"""A conversation's title, made after its first reply (DESIGN §15): one small model
call through the egress (screened, metered, its reply bounded to ``TITLE_TOKENS``),
written with ``titleSource: "auto"`` only while the conversation has no title.

It is made after the run has ended (its ``done`` sent, its final write made, its slot
freed), so it never delays a reply. The write is a compare-and-set on the stored
document (``manage.titled`` judges the fresh copy), so a title its owner gave
meanwhile, or one another process made, is never replaced, and a conversation deleted
meanwhile is not made again (``NotFound``). A failure to title is logged and ignored:
the next reply tries again.
"""

from __future__ import annotations

import logging
import re

from shared.agent.conversations.manage import titled
from shared.egress.gate import Egress
from shared.llm.base import ChatMessage, ModelRequest
from shared.schemas.documents import Conversation
from shared.store.base import ConversationStore

log = logging.getLogger(__name__)

MAX_AUTO_TITLE = 60
"""The most characters of a title made automatically (a person's may take 120)."""
TITLE_TOKENS = 24
"""The bound of the title's reply: a few words, whatever the model would write."""
# What of the first message and the first reply the model is shown: enough to name
# the subject, and a small request whatever their length.
_SHOWN_CHARS = 1_500
BRIEF = "Title this conversation."
WROTE = "The person wrote:"
REPLIED = "Spark AI Agent replied:"

_SPACES = re.compile(r"\s+")
_AROUND = "\"'“”‘’«»`*#.:;,!- "


def title_request(conversation: Conversation, system: str) -> ModelRequest | None:
    """The request that titles ``conversation`` from its first user message and the
    first reply after it (``None``: it has no such pair with words yet)."""
    asked = replied = ""
    for message in conversation.messages:
        if not asked:
            if message.role == "user" and message.text.strip():
                asked = message.text.strip()
        elif message.role == "assistant" and message.text.strip():
            replied = message.text.strip()
            break
    if not asked or not replied:
        return None
    brief = f"{BRIEF}\n\n{WROTE}\n{asked[:_SHOWN_CHARS]}\n\n{REPLIED}\n{replied[:_SHOWN_CHARS]}"
    return ModelRequest(
        system=system, messages=[ChatMessage("user", brief)], max_tokens=TITLE_TOKENS
    )


def cleaned(reply: str) -> str:
    """A model's title as a title: its first line, spaces collapsed, quotes and closing
    punctuation dropped, and at most ``MAX_AUTO_TITLE`` characters, cut at a word."""
    line = next((line for line in reply.splitlines() if line.strip()), "")
    line = "".join(c for c in line if c.isprintable())
    title = _SPACES.sub(" ", line).strip(_AROUND)
    if len(title) > MAX_AUTO_TITLE:
        cut = title[: MAX_AUTO_TITLE + 1].rsplit(" ", 1)[0]
        title = cut if cut and len(cut) <= MAX_AUTO_TITLE else title[:MAX_AUTO_TITLE]
        title = title.rstrip(_AROUND)
    return title


class Titles:
    """Makes conversations' titles after their first reply; one per process."""

    def __init__(self, egress: Egress, store: ConversationStore, system: str) -> None:
        self._egress = egress
        self._store = store
        self._system = system

    async def title(self, user_id: str, conversation: Conversation) -> None:
        """Title ``conversation`` (as its run's final write left it) if it is an agent
        conversation with no title yet; never raises (a failure is logged)."""
        if conversation.kind != "agent" or conversation.title_source is not None:
            return
        if conversation.title is not None:
            return
        request = title_request(conversation, self._system)
        if request is None:
            return
        try:
            reply = await self._egress.complete(user_id, request, "The title")
            title = cleaned(reply)
            if not title:
                log.warning("conversation %s: the model gave no title", conversation.id)
                return
            await self._store.mutate(user_id, conversation.id, lambda c: titled(c, title))
        except Exception as exc:  # a title is a nicety: the reply is written already
            log.warning("conversation %s: no title made: %r", conversation.id, exc)
