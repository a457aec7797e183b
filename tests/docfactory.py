"""Real files of every type a document analyzer must read, with known content (test support, not tests).

Every generator writes into ``folder`` (created if missing) and returns the file's ``Path``. The files are
genuine: the PDFs and DOCX are written by hand here (no PDF/DOCX library needed), XLSX and PPTX come from
openpyxl and python-pptx, the PNG from zlib/struct. Nothing touches the network; output is deterministic.

Strings tests can assert on are module constants (``LONG_FACT``, ``PNG_TEXT`` ...) or the caller's own input.
"""

from __future__ import annotations

import csv as _csv
import hashlib
import html as _html
import json as _json
import random
import struct
import textwrap
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from xml.sax.saxutils import escape as _xml_escape

PDF_PASSWORD = "open-sesame"
PNG_TEXT = "Tea garden photograph, taken at dawn"
LONG_FACT = "The calibration constant of the Halden array is 0.7734."
ZIP_BOMB_SIZE = 300 * 1024 * 1024


def _target(folder: str | Path, name: str) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


# --- PDF -----------------------------------------------------------------------------------------------


def _rc4(key: bytes, data: bytes) -> bytes:
    """RC4, as the PDF standard security handler (revision 2) uses it."""
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out = bytearray()
    i = j = 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")


def _page_stream(text: str) -> bytes:
    """A content stream drawing ``text`` in 11pt Helvetica, wrapped at 90 characters."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        lines.extend(textwrap.wrap(paragraph, 90) or [""])
    ops = ["BT", "/F1 11 Tf", "14 TL", "56 786 Td"]
    for line in lines:
        raw = line.encode("cp1252", errors="replace")
        raw = raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")
        ops.append(f"({raw.decode('latin-1')}) Tj T*")
    ops.append("ET")
    return "\n".join(ops).encode("latin-1")


def _pdf_bytes(pages: Sequence[str], password: str | None = None) -> bytes:
    """A minimal valid PDF, one page per string; with ``password``, RC4-40 encrypted (user = owner password)."""
    n = len(pages)
    objects: list[bytes | tuple[bytes, bytes]] = [  # object i+1; a tuple is (dictionary, stream data)
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(n)) + b"] /Count %d >>" % n,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    for i, text in enumerate(pages):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Resources << /Font << /F1 3 0 R >> >>"
            b" /Contents %d 0 R >>" % (5 + 2 * i)
        )
        objects.append((b"", _page_stream(text)))
    file_id = hashlib.md5(repr(list(pages)).encode()).digest()
    key = None
    if password is not None:
        pad = (password.encode("latin-1") + _PAD)[:32]
        permissions = struct.pack("<i", -4)
        owner = _rc4(hashlib.md5(pad).digest()[:5], pad)
        key = hashlib.md5(pad + owner + permissions + file_id).digest()[:5]
        user = _rc4(key, _PAD)
        objects.append(
            b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -4 >>" % (owner.hex().encode(), user.hex().encode())
        )
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number
        if isinstance(obj, tuple):
            data = obj[1]
            if key is not None:
                data = _rc4(hashlib.md5(key + struct.pack("<i", number)[:3] + b"\0\0").digest()[:10], data)
            out += b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"
        else:
            out += obj
        out += b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = b"<< /Size %d /Root 1 0 R /ID [<%s> <%s>]" % (
        len(objects) + 1,
        file_id.hex().encode(),
        file_id.hex().encode(),
    )
    if key is not None:
        trailer += b" /Encrypt %d 0 R" % len(objects)
    out += b"trailer\n" + trailer + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def pdf(folder: str | Path, pages: Sequence[str], name: str = "document.pdf") -> Path:
    """A real multi-page PDF, one page per string (newlines start paragraphs; text must fit cp1252).

    Each page holds about 50 lines of 90 characters; longer text runs off the page.
    """
    path = _target(folder, name)
    path.write_bytes(_pdf_bytes(pages))
    return path


def encrypted_pdf(
    folder: str | Path,
    pages: Sequence[str] = ("Confidential: the vault combination is 12-34-56.",),
    password: str = PDF_PASSWORD,
    name: str = "encrypted.pdf",
) -> Path:
    """A password-protected PDF (standard security handler, RC4 40-bit); opening it needs ``password``.

    With the password, pdfminer reads the pages back (``extract_text(path, password=...)``); without it,
    pdfminer raises ``PDFPasswordIncorrect`` (so markitdown's ``convert`` fails).
    """
    path = _target(folder, name)
    path.write_bytes(_pdf_bytes(pages, password=password))
    return path


def corrupt_pdf(folder: str | Path, name: str = "corrupt.pdf", *, kind: str = "garbage") -> Path:
    """A broken PDF: ``kind="garbage"`` is a PDF header then random bytes; ``"text"`` a PDF header then
    plain text (what a text reader would happily return); ``"truncated"`` is the first third of a valid
    two-page PDF (cut inside the first page's content stream, no xref, no trailer)."""
    if kind == "garbage":
        data = b"%PDF-1.4\n" + random.Random(7).randbytes(2048)
    elif kind == "text":
        data = b"%PDF-1.4 garbage, not a document\n"
    elif kind == "truncated":
        whole = _pdf_bytes(["This page was cut off in transit.", "So was this one."])
        data = whole[: whole.index(b"stream\n") + 20]
    else:
        raise ValueError(f"kind must be 'garbage', 'text' or 'truncated', not {kind!r}")
    path = _target(folder, name)
    path.write_bytes(data)
    return path


# --- Office documents ----------------------------------------------------------------------------------

_W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
_DOCX_PARTS = {
    "[Content_Types].xml": (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/word/document.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
        '<Override PartName="/word/styles.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.styles+xml"/>'
        "</Types>"
    ),
    "_rels/.rels": (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Target="word/document.xml" '
        'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"/>'
        "</Relationships>"
    ),
    "word/_rels/document.xml.rels": (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Target="styles.xml" '
        'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles"/>'
        "</Relationships>"
    ),
    "word/styles.xml": (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:styles {_W}>'
        '<w:style w:type="paragraph" w:default="1" w:styleId="Normal"><w:name w:val="Normal"/></w:style>'
        '<w:style w:type="paragraph" w:styleId="Heading1"><w:name w:val="Heading 1"/></w:style>'
        "</w:styles>"
    ),
}


def _w_para(text: str, style: str | None = None) -> str:
    props = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f'<w:p>{props}<w:r><w:t xml:space="preserve">{_xml_escape(text)}</w:t></w:r></w:p>'


def docx(
    folder: str | Path,
    paragraphs: Sequence[str],
    headings: Mapping[int, str] | None = None,
    *,
    table: Sequence[Sequence[object]] | None = None,
    name: str = "document.docx",
) -> Path:
    """A real Word document: ``paragraphs`` in order, with ``headings[i]`` (a "Heading 1") placed before
    paragraph ``i`` (default: one heading "Overview" before the first), and an optional ``table`` at the end (first row = header).

    markitdown (mammoth) renders the headings as ``# heading`` and the table as a markdown table.
    """
    if headings is None:
        headings = {0: "Overview"}
    body = []
    for i, text in enumerate(paragraphs):
        if i in headings:
            body.append(_w_para(headings[i], "Heading1"))
        body.append(_w_para(text))
    if table:
        header = "<w:trPr><w:tblHeader/></w:trPr>"  # the first row is the header row
        rows = "".join(
            "<w:tr>" + (header if r == 0 else "") + "".join(f"<w:tc>{_w_para(str(c))}</w:tc>" for c in row) + "</w:tr>"
            for r, row in enumerate(table)
        )
        body.append(f"<w:tbl>{rows}</w:tbl>")
    document = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document {_W}><w:body>'
        + "".join(body)
        + "</w:body></w:document>"
    )
    path = _target(folder, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for part, xml in _DOCX_PARTS.items():
            zf.writestr(part, xml)
        zf.writestr("word/document.xml", document)
    return path


def xlsx(folder: str | Path, sheets: Mapping[str, Sequence[Sequence[object]]], name: str = "workbook.xlsx") -> Path:
    """A real Excel workbook (openpyxl), one worksheet per ``sheets`` entry, rows in order (first row = header)."""
    from openpyxl import Workbook

    workbook = Workbook()
    workbook.remove(workbook.active)
    for title, rows in sheets.items():
        sheet = workbook.create_sheet(title)
        for row in rows:
            sheet.append(list(row))
    path = _target(folder, name)
    workbook.save(path)
    return path


def pptx(folder: str | Path, slides: Sequence[tuple[str, str]], name: str = "slides.pptx") -> Path:
    """A real PowerPoint deck (python-pptx): one "Title and Content" slide per ``(title, body)``."""
    from pptx import Presentation

    deck = Presentation()
    for title, body in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    path = _target(folder, name)
    deck.save(path)
    return path


# --- Text formats --------------------------------------------------------------------------------------


def csv(folder: str | Path, rows: Sequence[Sequence[object]], name: str = "table.csv") -> Path:
    """A UTF-8 CSV file of ``rows`` (first row = header)."""
    path = _target(folder, name)
    with path.open("w", newline="", encoding="utf-8") as fh:
        _csv.writer(fh).writerows(rows)
    return path


def html(folder: str | Path, title: str, paragraphs: Sequence[str], name: str = "page.html") -> Path:
    """An HTML page with ``<title>``/``<h1>`` = ``title`` and one ``<p>`` per paragraph (text is escaped)."""
    body = "\n".join(f"<p>{_html.escape(p)}</p>" for p in paragraphs)
    page = (
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{_html.escape(title)}</title></head>\n'
        f"<body><h1>{_html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )
    path = _target(folder, name)
    path.write_text(page, encoding="utf-8")
    return path


def json(folder: str | Path, obj: object, name: str = "data.json") -> Path:
    """``obj`` as indented UTF-8 JSON (non-ASCII kept as is)."""
    path = _target(folder, name)
    path.write_text(_json.dumps(obj, indent=2, ensure_ascii=False), encoding="utf-8")
    return path


def txt(folder: str | Path, text: str, name: str = "notes.txt", encoding: str = "utf-8") -> Path:
    """A plain-text file holding ``text`` in ``encoding``."""
    path = _target(folder, name)
    path.write_bytes(text.encode(encoding))
    return path


# --- Images, archives, junk ----------------------------------------------------------------------------


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(
    folder: str | Path, text_in_metadata: str = PNG_TEXT, name: str = "image.png", *, width: int = 64, height: int = 48
) -> Path:
    """A real RGB PNG (a colour gradient) with a ``tEXt`` chunk ``Description`` = ``text_in_metadata``
    (Latin-1). Pillow reads it back as ``Image.open(path).text["Description"]``."""
    rows = b"".join(
        b"\0" + bytes(v for x in range(width) for v in (x * 255 // width, y * 255 // height, 128))
        for y in range(height)
    )
    data = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    data += _png_chunk(b"tEXt", b"Description\0" + text_in_metadata.encode("latin-1"))
    data += _png_chunk(b"IDAT", zlib.compress(rows, 9)) + _png_chunk(b"IEND", b"")
    path = _target(folder, name)
    path.write_bytes(data)
    return path


def zip_archive(folder: str | Path, members: Mapping[str, bytes | str | Path], name: str = "archive.zip") -> Path:
    """A deflated zip: each member's content is bytes, text (UTF-8) or the bytes of an existing file."""
    path = _target(folder, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, content in members.items():
            if isinstance(content, Path):
                content = content.read_bytes()
            zf.writestr(member, content)
    return path


def zip_slip(folder: str | Path, name: str = "slip.zip") -> Path:
    """A zip whose members try to escape the extraction folder: ``../evil.txt`` and ``/abs/evil.txt``
    (both "You have been zip-slipped."), next to a harmless ``ok.txt`` ("A harmless member.")."""
    path = _target(folder, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("ok.txt", "A harmless member.")
        for member in ("../evil.txt", "/abs/evil.txt"):
            zf.writestr(zipfile.ZipInfo(member, (2024, 1, 1, 0, 0, 0)), "You have been zip-slipped.")
    return path


@lru_cache(maxsize=4)
def _deflated_zeros(size: int) -> tuple[bytes, int]:
    """``size`` zero bytes as (raw deflate stream, CRC-32); cached, since 300 MB take about a second."""
    compressor, crc, chunk = zlib.compressobj(9, zlib.DEFLATED, -15), 0, bytes(1 << 20)
    parts = []
    for start in range(0, size, len(chunk)):
        piece = chunk[: min(len(chunk), size - start)]
        parts.append(compressor.compress(piece))
        crc = zlib.crc32(piece, crc)
    parts.append(compressor.flush())
    return b"".join(parts), crc


def zip_bomb(folder: str | Path, size: int = ZIP_BOMB_SIZE, name: str = "bomb.zip", member: str = "zeros.txt") -> Path:
    """A small zip (about 300 KB) with one member, ``member``, that inflates to ``size`` zero bytes (default
    300 MiB, at most 4 GiB). The headers tell the truth (``ZipInfo.file_size == size``), so a careful reader
    can refuse it before inflating anything."""
    if not 0 <= size < 1 << 32:
        raise ValueError("size must be below 4 GiB (no zip64 here)")
    compressed, crc = _deflated_zeros(size)
    # zipfile cannot store pre-compressed data, so the archive is assembled by hand.
    raw_name, dos_date = member.encode(), (2024 - 1980) << 9 | 1 << 5 | 1
    common = struct.pack("<HHHHIII", 0, 8, 0, dos_date, crc, len(compressed), size)  # flags method time date crc sizes
    local = struct.pack("<IH", 0x04034B50, 20) + common + struct.pack("<HH", len(raw_name), 0) + raw_name
    central = (
        struct.pack("<IHH", 0x02014B50, 20, 20) + common + struct.pack("<HHHHHII", len(raw_name), 0, 0, 0, 0, 0, 0)
    )
    central += raw_name
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(compressed), 0)
    path = _target(folder, name)
    path.write_bytes(local + compressed + central + end)
    return path


def unsupported(folder: str | Path, name: str = "mystery.qzx", size: int = 4096) -> Path:
    """Random (seeded) binary bytes under an extension no converter knows."""
    path = _target(folder, name)
    path.write_bytes(random.Random(name).randbytes(size))
    return path


# --- Long documents for map-reduce ---------------------------------------------------------------------

_FILLER_WORDS = (
    "survey team station ledger harbour archive committee weather timber granite orchard canal ferry "
    "inventory schedule measurement boundary district lantern workshop quarry meadow bridge council "
    "record season shipment valley corridor signal register"
).split()


def _filler(rng: random.Random, sentences: int) -> str:
    out = []
    for _ in range(sentences):
        words = [rng.choice(_FILLER_WORDS) for _ in range(rng.randint(8, 14))]
        out.append("The " + " ".join(words) + f" was noted in entry {rng.randint(100, 999)}.")
    return " ".join(out)


def long_text_document(
    folder: str | Path,
    sections: int = 40,
    *,
    fact_section: int | None = None,
    fmt: str = "md",
    name: str | None = None,
) -> Path:
    """A long document of numbered sections ("Section 1" ... "Section N", about 1.2 KB of filler each) where
    only section ``fact_section`` (default ``sections * 2 // 3``, i.e. 26 of 40) states ``LONG_FACT``.

    ``fmt="md"`` writes markdown with ``## Section k`` headings; ``fmt="pdf"`` writes one page per section.
    """
    if fact_section is None:
        fact_section = sections * 2 // 3
    if not 1 <= fact_section <= sections:
        raise ValueError(f"fact_section must be in 1..{sections}")
    rng = random.Random(sections)
    texts = []
    for k in range(1, sections + 1):
        paragraphs = [_filler(rng, 5), _filler(rng, 5)]
        if k == fact_section:
            paragraphs.insert(1, LONG_FACT)
        texts.append((f"Section {k}", paragraphs))
    if fmt == "md":
        doc = "# Field survey compendium\n\n" + "".join(
            f"## {title}\n\n" + "\n\n".join(paragraphs) + "\n\n" for title, paragraphs in texts
        )
        return txt(folder, doc, name or "long.md")
    if fmt == "pdf":
        return pdf(folder, [title + "\n" + "\n".join(paragraphs) for title, paragraphs in texts], name or "long.pdf")
    raise ValueError(f"fmt must be 'md' or 'pdf', not {fmt!r}")
