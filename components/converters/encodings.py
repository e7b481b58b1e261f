"""
Decoding a text file whatever its encoding, for `TextToDocument` and the CSV extractor (which runs in a child process
that imports no Haystack): a byte order mark decides first (UTF-8, UTF-16, UTF-32), then UTF-8, then the fallback
encodings in order (by default cp1252, then latin-1, which decodes any byte). A file holding NUL bytes is UTF-16
without a byte order mark or not text: no 8-bit encoding or UTF-8 text has them.

Usage:
```python
from gatehouse.components.converters.encodings import decoded, text_of

decoded(b"caf\xe9", ["cp1252", "latin-1"])   # "café"; None when no encoding tried decodes it
text_of(b"caf\xe9")                          # the same with the default fallbacks; ValueError instead of None
```
"""

import codecs

# UTF-32's marks first: UTF-32-LE's begins with UTF-16-LE's.
BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
DEFAULT_FALLBACK_ENCODINGS = ["cp1252", "latin-1"]


def candidates(data: bytes, fallback_encodings: list[str]) -> list[str]:
    """The encodings to try on `data`, in order."""
    for mark, encoding in BYTE_ORDER_MARKS:
        if data.startswith(mark):
            return [encoding]
    if b"\x00" in data:  # UTF-16 without a mark: the NULs are the high bytes of its ASCII characters
        return ["utf-16-le" if data[1::2].count(0) >= data[0::2].count(0) else "utf-16-be"]
    return ["utf-8", *fallback_encodings]


def decoded(data: bytes, fallback_encodings: list[str]) -> str | None:
    """`data` decoded by the first of its `candidates` that decodes it (without a byte order mark); None if none does."""
    for encoding in candidates(data, fallback_encodings):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return None


def text_of(data: bytes) -> str:
    """`data` decoded with the default fallback encodings; a `ValueError` naming those tried when none decodes it."""
    text = decoded(data, DEFAULT_FALLBACK_ENCODINGS)
    if text is None:
        raise ValueError(f"not text in {', '.join(candidates(data, DEFAULT_FALLBACK_ENCODINGS))}")
    return text
