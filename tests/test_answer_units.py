from haystack import Document

from gatehouse.components.answer_units import (answer_units, completed, excerpt, fields, flow, is_row,
                                               passage_units, reading_length, render, section_start)

REFERENCE = """Settings are read at start-up.

#### LISTEN_PORT

- Default: 7700
- Description: Port the server listens on

To reset the cache:

1. Stop the server.
2. Delete the cache folder.

You can pass a timeout per call:

```python
client.get(url, timeout=3)
```

- Release: 2.1; Date: 2024-05-01; Status: Supported
"""


def units():
    return passage_units(Document(content=REFERENCE, meta={"section": "Configuration"}), 0)


def test_sentences_keep_their_heading_context():
    sentence = units()[0]
    assert (sentence.kind, sentence.text, sentence.context) == ("sentence", "Settings are read at start-up.",
                                                                "Configuration")


def test_key_value_block_under_a_heading():
    block = next(u for u in units() if u.kind == "block")
    assert block.lead == "LISTEN_PORT" and block.context == "Configuration › LISTEN_PORT"
    assert "Default: 7700" in block.text and "Description: Port the server listens on" in block.text
    assert render(block, "S2") == "LISTEN_PORT: [S2]\n\n- Default: 7700 [S2]\n- Description: Port the server listens on [S2]"


def test_item_carries_its_label():
    item = next(u for u in units() if u.kind == "item" and "7700" in u.text)
    assert item.lead == "LISTEN_PORT"
    assert render(item, "S1") == "LISTEN_PORT: [S1]\n\n- Default: 7700 [S1]"


def test_numbered_list_with_its_lead_in():
    steps = next(u for u in units() if u.kind == "list")
    assert steps.lead == "To reset the cache:" and steps.items == ("1. Stop the server.", "2. Delete the cache folder.")
    assert render(steps, "S1").startswith("To reset the cache: [S1]\n\n1. Stop the server. [S1]")


def test_code_block_with_its_lead_in():
    code = next(u for u in units() if u.kind == "code")
    assert code.lead == "You can pass a timeout per call:"
    assert render(code, "S3") == ("You can pass a timeout per call: [S3]\n\n```python\nclient.get(url, timeout=3)\n```"
                                  "\n\n[S3]")
    assert not any(u.kind == "sentence" and u.text.endswith(":") for u in units())


def test_table_row_is_an_item_with_its_headers():
    row = next(u for u in units() if "Release: 2.1" in u.text)
    assert row.kind == "item" and "Date: 2024-05-01" in row.text


def test_fields_of_a_row_and_not_of_a_block():
    row = next(u for u in units() if "Release: 2.1" in u.text)
    assert fields(row) == [("Release", "2.1"), ("Date", "2024-05-01"), ("Status", "Supported")] and is_row(row)
    block = next(u for u in units() if u.kind == "block")
    assert fields(block) == [] and not is_row(block)
    grouped = passage_units(Document(content="- Finance › Name: Ada; Cost: 3; 4"), 0)[0]
    assert fields(grouped) == [("Name", "Ada"), ("Cost", "3; 4")]  # a group label left out, a '; ' inside a cell
    assert fields(next(u for u in units() if u.kind == "sentence")) == []


def test_completed_shows_a_table_row_alone_with_its_caption():
    sheet = passage_units(Document(content="Staff directory, 2024:\n\n- Name: Ada Lovelace; Team: Data; Room: 4\n"
                                           "- Name: Alan Turing; Team: Research; Room: 7\n"
                                           "- Name: Grace Hopper; Team: Compilers; Room: 2"), 0)
    row = next(u for u in sheet if "Alan Turing" in u.text)
    assert completed(row, sheet) == [row]
    assert render(row, "S1") == "Staff directory, 2024: [S1]\n\n- Name: Alan Turing; Team: Research; Room: 7 [S1]"
    headless = passage_units(Document(content="- Name: Ada; Team: Data\n- Name: Alan; Team: Research"), 0)
    assert completed(headless[0], headless) == [headless[0]]


def test_answer_units_number_the_passages():
    both = answer_units([Document(content="One sentence here."), Document(content="Another sentence here.")])
    assert [(u.passage, u.key) for u in both] == [(0, (0, 0, 0)), (1, (1, 0, 0))]


def test_flow_shows_each_list_once_and_leaves_out_a_rule():
    reading = flow(passage_units(Document(content=REFERENCE + "\n---\n\nThe end of it.", meta={}), 0), 0)
    assert [u.kind for u in reading] == ["sentence", "block", "list", "code", "item", "sentence"]


def test_completed_shows_the_key_first_then_what_follows_in_its_section_within_the_bound():
    all_units = units()
    first = all_units[0]
    # "Settings are read at start-up." is followed by the LISTEN_PORT heading: another section, nothing is added.
    assert completed(first, all_units) == [first]
    steps = next(u for u in all_units if u.kind == "list")
    code = next(u for u in all_units if u.kind == "code")
    assert [u.kind for u in completed(steps, all_units)] == ["list", "code", "item"]
    assert completed(steps, all_units, max_words=len(steps.text.split())) == [steps]  # the bound
    # An item is shown as its list, with the lead-in.
    item = next(u for u in all_units if u.kind == "item" and u.text.startswith("1. Stop"))
    assert completed(item, all_units)[0] == steps
    assert reading_length(code) == len(code.lead.split()) + 1  # a code block counts its lines, not its tokens


def test_completed_shows_one_procedure():
    two = passage_units(Document(content="To rotate a key:\n\n1. Open Keys.\n2. Click Rotate.\n\nTo delete a key:\n\n"
                                         "1. Open Keys.\n2. Click Delete.", meta={}), 0)
    rotate = next(u for u in two if u.kind == "list")
    assert completed(rotate, two) == [rotate]


def test_section_start_from_the_first_unit_within_the_bound():
    all_units = units()
    assert section_start(0, all_units, max_words=10) == [all_units[0]]
    assert [u.kind for u in section_start(0, all_units)] == ["sentence", "block", "list", "code", "item"]


def test_completed_shows_an_item_its_list_cut_before_it_alone():
    lines = "\n".join(f"- key{n}: value {n}" for n in range(1, 15))
    units = answer_units([Document(content=f"Order 7:\n\n{lines}\n- shipCity: Lyon", meta={"source_id": "S1"})])
    key = next(u for u in units if "shipCity" in u.text)
    shown = completed(key, units)
    assert "shipCity: Lyon" in render(shown[0], "S1") and "Order 7" in render(shown[0], "S1")
    early = next(u for u in units if u.text.endswith("key2: value 2"))
    assert completed(early, units)[0].kind == "list"  # an item its list shows: the list


QUESTION_TERMS = ["citi", "sheryl", "baxter"]  # "Which city does Sheryl Baxter live in?", as Lexicon reads it


def test_excerpt_shows_a_wide_record_as_its_name_and_the_fields_asked_for():
    row = "- " + "; ".join(["Name: Sheryl Baxter", "Company: Rasmussen Group",
                            *(f"Column {n}: value number {n}" for n in range(40)), "City: East Leonard", "Zip: 4019"])
    key = passage_units(Document(content=f"Customers:\n\n{row}"), 0)[0]
    shown = excerpt(key, QUESTION_TERMS, max_words=80)
    assert shown.items == ("- Name: Sheryl Baxter; …; City: East Leonard; …",) and shown.lead == key.lead
    assert render(shown, "S1") == "Customers: [S1]\n\n- Name: Sheryl Baxter; …; City: East Leonard; … [S1]"
    assert (shown.passage, shown.first, shown.last) == (key.passage, key.first, key.last)  # still cites the row


def test_excerpt_shows_long_notes_as_the_matching_sentence_with_its_neighbours():
    filler = " ".join(f"Filler sentence {n} says nothing much here." for n in range(20))
    notes = f"- Speaker notes: {filler} The city office of Sheryl Baxter is in Leonard. Then more follows. {filler}"
    key = passage_units(Document(content=f"# Slide\n\n{notes}"), 0)[0]
    text = render(excerpt(key, QUESTION_TERMS, max_words=80), "S1")
    assert "- Speaker notes: … Filler sentence 19 says nothing much here. The city office of Sheryl Baxter is in " \
           "Leonard. Then more follows. … [S1]" in text
    assert len(text.split()) <= 80


def test_excerpt_keeps_a_short_unit_and_code_whole_and_cuts_a_long_list_to_its_matching_items():
    short = units()[0]
    assert excerpt(short, QUESTION_TERMS, max_words=80) == short
    items = "\n".join(f"- Office {n}: {'words ' * 12}in town" for n in range(6)) + "\n- Sheryl Baxter: city desk"
    lists = [u for u in passage_units(Document(content=f"Offices:\n\n{items}"), 0) if u.kind == "list"]
    shown = excerpt(lists[0], QUESTION_TERMS, max_words=40)
    assert shown.items == ("- Office 0: " + "words " * 12 + "in town", "- Office 1: " + "words " * 12 + "in town",
                           "…", "- Sheryl Baxter: city desk") and shown.lead == "Offices:"
    assert render(shown, "S1").endswith("in town [S1]\n…\n- Sheryl Baxter: city desk [S1]")


def test_excerpt_shows_a_block_of_more_items_than_shown_with_the_item_asked_for():
    fields = "\n".join(f"- {name}: value {n}" for n, name in enumerate(
        ["Id", "Name", "Street", "Zip", "Phone", "Fax", "Email", "Web", "Country", "City", "Region"]))
    block = next(u for u in passage_units(Document(content=f"### Office record\n\n{fields}"), 0) if u.kind == "block")
    assert len(block.items) == 8 and block.more == ("- Country: value 8", "- City: value 9", "- Region: value 10")
    shown = excerpt(block, QUESTION_TERMS, max_words=80)
    assert shown.items == (*block.items[:7], "…", "- City: value 9", "…")


def test_excerpt_of_one_long_run_on_sentence_is_the_window_holding_the_most_terms():
    run_on = "- " + " · ".join(f"Launching campaign number {n} in a region" for n in range(20)) + \
        " · The promotion runs 12 months with a budget of $100,000."
    item = passage_units(Document(content=f"# Promotion plan\n\n{run_on}"), 0)[0]
    shown = excerpt(item, ["budget", "promot", "month"], max_words=40)
    assert shown.items[0].startswith("- … ") and shown.items[0].endswith("with a budget of $100,000.")
    assert len(shown.items[0].split()) <= 40


def test_completed_adds_no_list_past_the_most_rows():
    record = "\n".join(f"- field{n}: {n}" for n in range(7))
    details = "\n".join(f"- item {n}; price: {n}" for n in range(2))
    shown_units = passage_units(Document(content=f"### Order\n\n{record}\n\nDetails:\n\n{details}"), 0)
    block = next(u for u in shown_units if u.kind == "block")
    assert completed(block, shown_units, max_items=8) == [block]  # 7 rows, and a list of 2 would make 9
    assert len(completed(block, shown_units, max_items=9)) == 2


def test_excerpt_of_a_long_list_keeps_the_item_naming_the_code_asked_about():
    codes = "\n".join([
        "- `GW-101` bad key: the key is unknown; register a new key in settings and restart the gateway.",
        "- `GW-102` missing scope: the key cannot register this gateway with the service at all.",
        "- `GW-103` clock drift: the node clock differs from the service by more than thirty seconds.",
        "- `GW-104` node limit: too many nodes are registered already for the plan you are on.",
        "- `GW-105` licence expired: the gateway keeps running for a while and logs this error hourly."])
    lists = [u for u in passage_units(Document(content=f"Registration errors:\n\n{codes}"), 0) if u.kind == "list"]
    question = ["gateway", "keep", "log", "gw", "103", "regist", "error"]  # "The gateway keeps logging GW-103 ..."
    shown = excerpt(lists[0], question, max_words=40)
    assert shown.items == ("…", codes.splitlines()[2], "…", codes.splitlines()[4])
