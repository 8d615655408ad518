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


@pytest.mark.parametrize(
    ("sent", "screened"),
    [
        ("pícK mé úp", WITHHELD),  # accents (combining marks dropped)
        ("pi<span>ck</span> me<br>up now", f"{WITHHELD} now"),  # a tag inside a word
        ("<p>pick</p><p>me</p><p>up</p>", f"<p>{WITHHELD}</p>"),
        ("if a<b then pick me up behind> your shed", f"if a<b then {WITHHELD}> your shed"),
        ('<span title="pick me up">hi</span>', f'<span title="{WITHHELD}">hi</span>'),
        ("code ٧٧٣١", f"code {WITHHELD}"),  # Arabic-Indic digits
    ],
)
def test_accents_tags_and_what_only_looks_like_a_tag_do_not_hide_words(
    sent: str, screened: str
) -> None:
    assert WITHHELD_NOW.text(sent) == screened


def test_a_number_written_in_parts_is_withheld_whole_and_by_the_parts_spaces_set_apart() -> None:
    screen = Withheld.of(["ring me on 07700 900-123 tonight"])
    assert screen.text("call 07700900123") == f"call {WITHHELD}"
    assert screen.text("call 07700 900 123") == f"call {WITHHELD}"
    assert screen.text("call 900123?") == f"call {WITHHELD}?"
    assert screen.text("page 900, line 123") == "page 900, line 123"


CHINESE = "明天下午四点半在体育馆后面接我"


@pytest.mark.parametrize(
    "quote", ["四点半在体", "四 点 半 在 体", "<b>四点</b>半在体", "四点半，在体育馆"]
)
def test_five_chinese_characters_of_a_withheld_message_are_withheld(quote: str) -> None:
    out = Withheld.of([CHINESE]).text(f"她说：{quote}。好的")
    assert WITHHELD in out and out.endswith("。好的") and "半在体" not in out


def test_kana_korean_and_thai_weigh_what_their_characters_say() -> None:
    screen = Withheld.of(
        [
            CHINESE,
            "明日の四時に迎えに来てください",
            "내일 체육관 뒤에서 기다릴게",
            "พรุ่งนี้ตอนสี่โมงครึ่งรอที่หลังโรงยิมนะ",
        ]
    )
    for ordinary in ("明天下午", "してください", "明日の", "체육관", "พรุ่งนี้"):
        assert screen.text(f"好：{ordinary}") == f"好：{ordinary}"
    for quote in ("四時に迎えに来て", "체육관 뒤에서 기다", "ตอนสี่โมงครึ่งรอที่หลังโรงยิม"):
        assert WITHHELD in screen.text(quote), quote
