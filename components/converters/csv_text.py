"""
A CSV file's text as markdown, for `CSVToDocument` (run in its child process, `extraction.py`): the first non-empty
row is the header and every later row becomes one item that keeps its column headers (`- Name: Ada; Team: Data`),
readable alone. The delimiter (comma, semicolon, tab or bar) is sniffed; the text is decoded as text files are
(`encodings.py`: a byte order mark, else UTF-8, else cp1252, else latin-1).
"""

import csv
import io

from gatehouse.components.converters.encodings import text_of
from gatehouse.components.converters.extraction import Text
from gatehouse.components.converters.xlsx_text import rows_with_headers


def extract(data: bytes, text: Text) -> None:
    """Add the CSV file's rows, each with its headers, to `text`."""
    content = text_of(data)
    try:
        dialect = csv.Sniffer().sniff(content[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows_with_headers(csv.reader(io.StringIO(content, newline=""), dialect), text)
