"""
TextToDocument: text and markdown files to documents, whatever their encoding.

Haystack's `TextFileToDocument` decodes with one encoding and skips a file it cannot decode, so a file saved in Windows'
cp1252 or in latin-1 gave no text at all. Here a byte order mark decides first (UTF-8, UTF-16, UTF-32), then UTF-8,
then the fallback encodings in order (cp1252, then latin-1, which decodes any byte): `encodings.py`.

Usage:
```python
from gatehouse.components.converters.text_to_document import TextToDocument

converter = TextToDocument()
converter.run(sources=["notes.txt"])["documents"][0].content
```
"""

import codecs

from haystack import component

from gatehouse.components.converters.encodings import DEFAULT_FALLBACK_ENCODINGS, candidates, decoded
from gatehouse.components.converters.sources import FileConverter


@component
class TextToDocument(FileConverter):
    """
    Converts text and markdown files to documents: UTF-8, UTF-16/32 with or without a mark, and 8-bit text; `run`
    (from `FileConverter`) gives one document per file.
    """

    unnamed = "text file"

    def __init__(self, *, fallback_encodings: list[str] | None = None) -> None:
        """
        :param fallback_encodings: Tried in order on text that has no byte order mark and is not UTF-8; default
            `["cp1252", "latin-1"]`.
        :raises ValueError: When an encoding is unknown.
        """
        self.fallback_encodings = list(DEFAULT_FALLBACK_ENCODINGS if fallback_encodings is None else fallback_encodings)
        for encoding in self.fallback_encodings:
            try:
                codecs.lookup(encoding)
            except LookupError as error:
                raise ValueError(f"TextToDocument: unknown fallback encoding {encoding!r}") from error

    def convert(self, data: bytes, name: str) -> tuple[str, dict]:
        """
        The text of a file.

        :param data: The file's bytes.
        :param name: The file, named in the error.
        :returns: The text, without a byte order mark, and no metadata (the splitter titles a markdown file by its
            front matter or first heading, other text by its file's name).
        :raises ValueError: When no encoding to try decodes it (naming those tried).
        """
        text = decoded(data, self.fallback_encodings)
        if text is None:
            raise ValueError(f"{name}: not text in {', '.join(candidates(data, self.fallback_encodings))} "
                             "(text_converter.fallback_encodings in index.yml)")
        return text, {}
