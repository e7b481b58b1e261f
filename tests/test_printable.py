import unicodedata

from gatehouse.components.printable import printable, printable_data

ESC, BEL = "\x1b", "\x07"


def test_printable_removes_escape_sequences_and_control_characters():
    text = (f"Lockers{ESC}]8;;https://evil.example/{BEL} are{ESC}]8;;{BEL} on level one{ESC}]0;title{ESC}\\"
            f"{ESC}[2J{ESC}[1;31m.\r\x00\x9b2J\x85")
    assert printable(text) == "Lockers are on level one."


def test_printable_removes_bidirectional_and_zero_width_characters():
    hidden = ("\u202e\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069\u200e\u200f\u061c"  # bidirectional controls
              "\u200b\u200c\u200d\u2060\u2061\u2064\ufeff\u00ad\u180e"  # zero-width, invisible operators, BOM
              "\U000e0001\U000e0041\U000e007f\ufff9\ufffb")  # tag characters, interlinear annotation
    assert all(unicodedata.category(char) == "Cf" for char in hidden)
    assert printable(f"pass{hidden}word") == "password"


def test_printable_keeps_text_newlines_tabs_and_other_scripts():
    text = "Étage 1\tΑθήνα\n東京 — ok ✓ ₂ مرحبا\u00a0שלום"
    assert printable(text) == text
    assert printable("plain ascii\n\twith tab") == "plain ascii\n\twith tab"


def test_printable_data_makes_every_string_of_a_json_value_printable():
    value = {"answer": f"hi{ESC}[2J", f"k\u200bey": [f"a\u202eb", ("t\u2066", 1)], "n": 2.5, "ok": True, "none": None}
    assert printable_data(value) == {"answer": "hi", "key": ["ab", ["t", 1]], "n": 2.5, "ok": True, "none": None}
    assert printable_data("x\x07") == "x" and printable_data(3) == 3
