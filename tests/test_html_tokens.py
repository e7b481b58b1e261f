from html.parser import HTMLParser

import pytest

from gatehouse.components.html_tokens import attributes, html_tokens


class Recorder(HTMLParser):
    """html.parser's tokens in html_tokens' shape."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tokens: list[tuple] = []

    def handle_starttag(self, tag, attrs):
        self.tokens.append(("start", tag, self.get_starttag_text(), False))

    def handle_startendtag(self, tag, attrs):
        self.tokens += [("start", tag, self.get_starttag_text(), True), ("end", tag)]

    def handle_endtag(self, tag):
        self.tokens.append(("end", tag))

    def handle_data(self, data):
        self.tokens.append(("text", data))


def joined(tokens) -> list[tuple]:
    out: list[tuple] = []
    for token in tokens:
        if token[0] == "text" and out and out[-1][0] == "text":
            out[-1] = ("text", out[-1][1] + token[1])
        else:
            out.append(tuple(token))
    return out


def parsed(fragment: str) -> list[tuple]:
    recorder = Recorder()
    recorder.feed(fragment)
    recorder.close()
    return joined(recorder.tokens)


def test_tokens_of_a_fragment():
    assert list(html_tokens('<p class="x">A &amp; B<br/></p><!-- c --><!DOCTYPE html><?pi?>')) == [
        ("start", "p", '<p class="x">', False), ("text", "A & B"), ("start", "br", "<br/>", True), ("end", "br"),
        ("end", "p")]


@pytest.mark.parametrize("fragment", [
    '<table><tr><th>City</th><td colspan="2">5th &gt; 4th</td></tr></table>',
    "<a href='x>y' title=\"q\">link</a> a < b and c<d > e",
    '<img alt="A &amp; B" src=x/><https://example.org/> <https://example.org>',
    "<script>if (a<b) {}</script><STYLE>p>a{}</style >text</ p></>",
    "<![CDATA[ raw ]]><![if x]>kept<![endif]><!x bogus>&#60;&lt",
    "<!-- a -- b --  ><a b = c d=e/>",
])
def test_tokens_are_those_of_html_parser(fragment):
    assert joined(html_tokens(fragment)) == parsed(fragment)


@pytest.mark.parametrize("fragment", ["<!-- open <b>x</b>", "<?pi <b>x", "</x never", "<a <b>", "<![CDATA[ x",
                                      "<a b='c d"])
def test_a_construct_left_open_is_text_up_to_the_next_bracket_as_html_parser_makes_it(fragment):
    assert joined(html_tokens(fragment)) == parsed(fragment)


def test_an_unclosed_script_drops_the_rest_and_an_unknown_section_is_dropped_where_html_parser_raised():
    assert list(html_tokens("a<script>never closed <b>x</b>")) == [("text", "a"),
                                                                     ("start", "script", "<script>", False)]
    with pytest.raises(AssertionError):
        parsed("<![foo[ x ]]>after")
    assert list(html_tokens("<![foo[ x ]]>after")) == [("text", "after")]


def test_attributes():
    assert attributes('<img ALT="A &amp; B" src=x alt2 = \'y\' hidden>') == {
        "alt": "A & B", "src": "x", "alt2": "y", "hidden": None}
