import subprocess
import sys

from gatehouse.components.text_units import shortened, split_sentences, split_units


def test_split_sentences_at_runs_of_marks_but_not_after_abbreviations_and_initials():
    text = "Dr. Smith met A. B. Jones. It rained!!! Then it stopped. [S1] Wow?! Yes."
    assert split_sentences(text) == ["Dr. Smith met A. B. Jones.", "It rained!!!", "Then it stopped. [S1]", "Wow?!",
                                     "Yes."]


def test_split_sentences_is_linear_in_runs_of_marks_and_initials():
    """A run of '!' with no space after it was read again from each of its marks, and the text since the last sentence
    end once per skipped initial ("A. A. A. ..."): 100,000 and 200,000 characters took minutes."""
    code = ("from gatehouse.components.text_units import shortened, split_sentences, split_units\n"
            "print(len(split_sentences('It rained. ' + '!' * 100_000)), "
            "len(split_sentences('It rained. ' + 'A. ' * 66_000 + 'Then.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "2 2\n"


def test_split_units_keeps_the_markers_after_a_code_block_with_it():
    units = split_units("Run: [S1]\n\n```shell\nmake backup\n```\n\n[S1]\n\nDone. [S2]")
    assert [(u.kind, u.text) for u in units] == [
        ("sentence", "Run: [S1]"), ("code", "```shell\nmake backup\n```\n\n[S1]"), ("sentence", "Done. [S2]")]


def test_shortened_keeps_what_fits_and_cuts_the_rest_at_a_word_within_the_limit():
    assert shortened("Rotate an API key", 17) == "Rotate an API key"
    assert shortened("Which payment methods are accepted?", 30) == "Which payment methods are…"
    assert shortened("Keys, scopes and limits", 12) == "Keys…"  # no dangling comma
    assert shortened("Supercalifragilistic", 8) == "Superca…"  # one word: cut inside it
    assert all(len(shortened("word " * 20, limit)) <= limit for limit in range(2, 40))
