"""The screen's reading of text (``shared/egress/words.py`` over ``fold.py``): a
withheld message's words are found however they are rewritten, blanked where they
stand, and ordinary text around them (or like them) is left alone."""

from __future__ import annotations

import pytest

from shared.egress.words import WITHHELD, Withheld

SAID = "Pick me up behind the gym at 4:30pm, the code is 7731"
WITHHELD_NOW = Withheld.of([SAID, "我明天下午三点在学校门口等你"])


@pytest.mark.parametrize(
    ("sent", "screened"),
    [
        ("_pick me up_ later", f"_{WITHHELD}_ later"),
        ("pick-me-up-behind-the-gym", WITHHELD),
        ("pick.me.up or pick/me/up or pick:me:up", f"{WITHHELD} or {WITHHELD} or {WITHHELD}"),
        ("pick,me,up and pick_me_up", f"{WITHHELD} and {WITHHELD}"),
        ("pi\u200dck me u\u00adp", WITHHELD),  # a zero-width joiner, a soft hyphen
        ("p\u0456ck m\u0435 up", WITHHELD),  # Cyrillic і and е
        ("ｐｉｃｋ ｍｅ ｕｐ", WITHHELD),  # full-width letters (NFKC)
        ("<b>pick</b>&nbsp;me up!", f"<b>{WITHHELD}!"),
        ("&#112;ick me up", WITHHELD),
        ('she wrote {\\"text\\": \\"pick me up\\"}', f'she wrote {{\\"text\\": \\"{WITHHELD}\\"}}'),
        ("\\u0070ick me up", WITHHELD),
        ("code _7731_", f"code _{WITHHELD}_"),
        ("7,731 or 77-31", f"{WITHHELD} or {WITHHELD}"),
        ("meet at 4:30 pm", f"meet {WITHHELD}"),
        ("at 4.30pm", WITHHELD),
        ("他说明天下午三点见", f"他说{WITHHELD}见"),  # six characters of it in a row
    ],
)
def test_a_withheld_message_is_found_however_it_is_rewritten(sent: str, screened: str) -> None:
    assert WITHHELD_NOW.text(sent) == screened


@pytest.mark.parametrize(
    "sent",
    [
        "at seven, behind the school",  # two of its words: ordinary
        "the gym is closed",
        "我们一起吃饭吧",  # Chinese sharing no six characters with it
        "明天见",  # three characters of it: an ordinary phrase
        "page 77, line 3",
        "4:15pm",
    ],
)
def test_ordinary_text_like_a_withheld_message_is_left_alone(sent: str) -> None:
    assert WITHHELD_NOW.text(sent) == sent


def test_a_short_message_is_withheld_whole_and_only_whole() -> None:
    short = Withheld.of(["see you soon"[:7]])  # "see you": two words, six letters
    assert short.text("I will see-you there") == f"I will {WITHHELD} there"
    assert Withheld.of(["ok"]).text("ok then") == "ok then"
