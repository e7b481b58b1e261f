"""
A CSV file's text as markdown, for `CSVToDocument` (run in its child process, `extraction.py`): its rows are read as
a sheet's (`tables.read_tables`): one-cell rows above the header are the caption, the header is the first row of
names, and every later row becomes one item that keeps its column names (`- Name: Ada; Team: Data`), readable alone.
The delimiter (comma, semicolon, tab or bar) is sniffed; the text is decoded as text files are (`encodings.py`: a
byte order mark, else UTF-8, else cp1252, else latin-1).
"""

import csv
import io

from gatehouse.components.converters.encodings import text_of
from gatehouse.components.converters.extraction import Text, TooMuchText, one_line
from gatehouse.components.tables import grid_rows


def extract(data: bytes, text: Text) -> None:
    """Add the CSV file's rows, each with its column names, to `text`."""
    content = text_of(data)
    if len(content) > text.max_chars:
        raise TooMuchText(len(content))
    try:
        dialect = csv.Sniffer().sniff(content[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    grid = []
    for row in csv.reader(io.StringIO(content, newline=""), dialect):
        cells = [one_line(cell) for cell in row]
        while cells and not cells[-1]:
            cells.pop()
        grid.append(cells)
    text.add(*grid_rows(grid))
