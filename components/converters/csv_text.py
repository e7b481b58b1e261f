"""
A CSV file's text as markdown, for `CSVToDocument` (run in its child process, `extraction.py`): the first non-empty
row is the header and every later row becomes one item that keeps its column headers (`- Name: Ada; Team: Data`),
readable alone. The delimiter (comma, semicolon, tab or bar) is sniffed; the text is decoded by its byte order mark,
else as UTF-8, else as cp1252.
"""

import codecs
import csv
import io

from gatehouse.components.converters.extraction import Text
from gatehouse.components.converters.xlsx_text import rows_with_headers


def decode(data: bytes) -> str:
    """The file's text: by its byte order mark (UTF-8, UTF-16), else UTF-8, else cp1252, else latin-1."""
    for mark, encoding in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                           (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(mark):
            return data.decode(encoding)
    for encoding in ("utf-8", "cp1252"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1")


def extract(data: bytes, text: Text) -> None:
    """Add the CSV file's rows, each with its headers, to `text`."""
    content = decode(data)
    try:
        dialect = csv.Sniffer().sniff(content[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows_with_headers(csv.reader(io.StringIO(content, newline=""), dialect), text)
