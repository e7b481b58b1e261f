"""TextToDocument: text files in UTF-8, UTF-16/32 (with or without a byte order mark), cp1252 and latin-1."""

import codecs

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream

from gatehouse.components.converters.text_to_document import TextToDocument

TEXT = "Café prices: 5 € per crème brûlée — “naïve” résumé.\n"


def test_init():
    assert TextToDocument().fallback_encodings == ["cp1252", "latin-1"]
    assert TextToDocument(fallback_encodings=["cp1251"]).fallback_encodings == ["cp1251"]
    with pytest.raises(ValueError, match="unknown fallback encoding 'klingon'"):
        TextToDocument(fallback_encodings=["klingon"])


def test_to_dict():
    assert component_to_dict(TextToDocument(fallback_encodings=["cp1251"]), "text_converter") == {
        "type": "gatehouse.components.converters.text_to_document.TextToDocument",
        "init_parameters": {"fallback_encodings": ["cp1251"]},
    }


def test_from_dict():
    data = {"type": "gatehouse.components.converters.text_to_document.TextToDocument",
            "init_parameters": {"fallback_encodings": ["latin-1"]}}
    converter = component_from_dict(TextToDocument, data, "text_converter")
    assert converter.fallback_encodings == ["latin-1"]


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (TEXT.encode("utf-8"), TEXT),
        (codecs.BOM_UTF8 + TEXT.encode("utf-8"), TEXT),
        (TEXT.encode("utf-16"), TEXT),  # with its byte order mark
        (TEXT.encode("utf-16-le"), TEXT),
        (TEXT.encode("utf-16-be"), TEXT),
        (TEXT.encode("utf-32"), TEXT),
        (TEXT.encode("cp1252"), TEXT),
        ("Grüße aus Köln, 30 °C\n".encode("latin-1"), "Grüße aus Köln, 30 °C\n"),
        (b"byte \x81 undefined in cp1252", "byte \x81 undefined in cp1252"),  # latin-1 decodes any byte
    ],
    ids=["utf-8", "utf-8-bom", "utf-16-bom", "utf-16-le", "utf-16-be", "utf-32", "cp1252", "latin-1", "any-byte"],
)
def test_run_decodes_the_encodings_text_files_come_in(data, text):
    stream = ByteStream(data=data, meta={"file_name": "notes.txt", "file_path": "guide/notes.txt", "kb": "faq"})
    documents = TextToDocument().run(sources=[stream], meta={"tenant": "public"})["documents"]
    assert [document.content for document in documents] == [text]
    assert documents[0].meta == {"file_name": "notes.txt", "file_path": "notes.txt", "kb": "faq", "tenant": "public"}


def test_run_reads_paths(tmp_path):
    path = tmp_path / "legacy.md"
    path.write_bytes("# Größe\n\nÜbersicht".encode("latin-1"))
    assert TextToDocument().run(sources=[path])["documents"][0].content == "# Größe\n\nÜbersicht"


def test_run_fails_a_file_no_encoding_decodes_naming_them():
    with pytest.raises(ValueError, match=r"notes.txt: not text in utf-8, ascii \(text_converter.fallback_encodings"):
        TextToDocument(fallback_encodings=["ascii"]).run(sources=[ByteStream(data=b"caf\xe9", meta={"file_name":
                                                                                                 "notes.txt"})])
    with pytest.raises(ValueError, match="image.txt: not text in utf-16-le"):
        TextToDocument().run(sources=[ByteStream(data=b"\x00\xd8a\x00", meta={"file_name": "image.txt"})])
