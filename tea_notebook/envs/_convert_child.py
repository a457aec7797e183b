"""Document conversion inside the sandbox (sent as source to a sandbox session; stdlib + markitdown).

``convert(path, out, name, limits)`` writes the markdown of the file at ``path`` to ``out`` and
returns ``{"kind", "chars", "problems", "members"}``. A ZIP archive is unpacked beneath
``out + ".d"`` (member names that would leave it are refused, sizes and counts are bounded) and its
members are converted one by one. The host never parses the documents itself: a hostile file can
only break this process, which the sandbox's limits contain.
"""

import os
import re
import stat
import struct
import zipfile
import zlib

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff")
TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".log", ".py", ".yaml", ".yml", ".toml", ".ini", ".xml")
KNOWN = (".pdf", ".docx", ".xlsx", ".xls", ".csv", ".pptx", ".html", ".htm", ".json", ".zip", ".ipynb", ".epub")
#: binary formats and the one markitdown converter that reads each: markitdown's own dispatch would fall
#: back to reading an unreadable file as plain text, handing its raw bytes on as the document's text
BINARY = {
    ".pdf": "PdfConverter",
    ".docx": "DocxConverter",
    ".xlsx": "XlsxConverter",
    ".xls": "XlsConverter",
    ".pptx": "PptxConverter",
    ".epub": "EpubConverter",
}
_CONVERTER = []


def _markitdown():
    if not _CONVERTER:
        from markitdown import MarkItDown

        _CONVERTER.append(MarkItDown())
    return _CONVERTER[0]


def _png_text(data):
    """tEXt/iTXt chunks of a PNG as ``key: value`` lines."""
    out, pos = [], 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"tEXt" and b"\0" in body:
            key, _, value = body.partition(b"\0")
            out.append("%s: %s" % (key.decode("latin-1"), value.decode("latin-1")))
        elif kind == b"zTXt" and b"\0" in body:
            key, _, value = body.partition(b"\0")
            try:
                out.append("%s: %s" % (key.decode("latin-1"), zlib.decompress(value[1:]).decode("latin-1")))
            except zlib.error:
                pass
        elif kind == b"iTXt" and b"\0" in body:
            key, _, rest = body.partition(b"\0")
            value = rest[2:].split(b"\0", 2)[-1]
            out.append("%s: %s" % (key.decode("latin-1"), value.decode("utf-8", "replace")))
        if kind == b"IEND":
            break
        pos += 12 + length
    return out


def _image(path, name):
    """An image's format, size and embedded text (the host adds a description when its model sees images)."""
    with open(path, "rb") as fh:
        data = fh.read(4 * 1024 * 1024)
    lines = ["Image file %s (%d bytes)" % (name, os.path.getsize(path))]
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        lines.append("Format: PNG, %d x %d pixels" % (width, height))
        lines += ["Text: " + t for t in _png_text(data)]
    elif data.startswith(b"\xff\xd8"):
        lines.append("Format: JPEG")
    elif data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        lines.append("Format: GIF, %d x %d pixels" % (width, height))
    return "\n".join(lines)


def _decode(raw):
    """Text in UTF-8, else in the encoding charset_normalizer (a markitdown dependency) detects —
    when there is enough text to tell; a short text falls back to Windows-1252, the usual legacy one."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        if len(raw) < 2048:
            raise ImportError  # too little text for detection to beat the common case
        from charset_normalizer import from_bytes

        best = from_bytes(raw).best()
        if best is not None:
            return str(best)
    except ImportError:
        pass
    return raw.decode("cp1252", "replace")


def _one(path, name):
    """``(kind, markdown)`` of one file; raises with a readable message when it cannot be read."""
    suffix = os.path.splitext(name)[1].lower()
    if suffix in IMAGE_SUFFIXES:
        return "image", _image(path, name)
    if suffix in TEXT_SUFFIXES:
        with open(path, "rb") as fh:
            raw = fh.read()
        if b"\0" in raw[:4096]:
            raise ValueError("it looks like binary data, not text")
        return "text", _decode(raw)
    if suffix and suffix not in KNOWN:
        raise ValueError("the %s format is not supported" % suffix)
    with open(path, "rb") as fh:
        head = fh.read(8)
    if not suffix and b"\0" in head:
        raise ValueError("a file without an extension that is not text is not supported")
    if suffix == ".pdf" and not head.startswith(b"%PDF"):
        raise ValueError("it is not a PDF (no %PDF header): the file is corrupt or mislabelled")
    encrypted = False
    if suffix == ".pdf":
        with open(path, "rb") as fh:
            encrypted = b"/Encrypt" in fh.read()
    try:
        converter = _markitdown()
        if suffix in BINARY:
            import markitdown.converters
            from markitdown import StreamInfo

            converter = getattr(markitdown.converters, BINARY[suffix])()
    except ImportError as exc:  # not the file's fault: say so rather than call it corrupt
        raise RuntimeError("markitdown cannot be imported by the sandbox's interpreter (%s)" % exc) from None
    try:
        if suffix in BINARY:
            with open(path, "rb") as fh:
                result = converter.convert(fh, StreamInfo(extension=suffix, filename=name, local_path=path))
        else:
            result = converter.convert(path)
    except Exception as exc:  # noqa: BLE001 - markitdown raises per-format errors
        # markitdown says "File conversion failed after 1 attempts:" and puts each converter's own
        # error ("PdfConverter threw PDFSyntaxError with message: ...") on the lines below it
        message = [line.strip().lstrip("- ").strip() for line in str(exc).splitlines()]
        message = [line for line in message if line]
        if len(message) > 1 and message[0].startswith("File conversion failed"):
            message = message[1:]
        elif message and suffix in BINARY:  # the format's converter itself raised: its error's type says what
            message[0] = "%s: %s" % (type(exc).__name__, message[0])
        cause = exc.__cause__ or exc.__context__
        detail = "%s: %s" % (type(cause).__name__, cause) if cause is not None else ""
        text = "; ".join(message) if message else type(exc).__name__
        if encrypted or "password" in (text + detail).lower() or "encrypt" in (text + detail).lower():
            raise ValueError("the file is password-protected (encrypted)") from None
        raise ValueError(
            "the %s file is corrupt or cannot be read: %s%s"
            % (suffix.lstrip(".").upper() or "text", text[:300], (" (" + detail[:200] + ")") if detail else "")
        ) from None
    markdown = result.text_content or ""
    if suffix in BINARY:  # the tidying markitdown's own dispatch applies: lines without trailing blanks
        markdown = re.sub(r"\n{3,}", "\n\n", "\n".join(line.rstrip() for line in re.split(r"\r?\n", markdown)))
    if encrypted and not markdown.strip():
        raise ValueError("the PDF is encrypted (password-protected) and gave no text")
    if suffix in BINARY and not markdown.strip():
        raise ValueError(
            "the %s file gave no text: it holds none that can be extracted (a scanned image, an empty or a "
            "damaged document)" % suffix.lstrip(".").upper()
        )
    return (suffix.lstrip(".") or "text"), markdown


def _unpack(path, folder, limits):
    """Members of a ZIP archive extracted beneath ``folder``: ``[(name, path)]`` and problems."""
    problems, out = [], []
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise ValueError("not a readable ZIP archive (%s)" % exc) from None
    with archive:
        infos = [i for i in archive.infolist() if not i.is_dir()]
        if len(infos) > limits["members"]:
            problems.append("the archive has %d members; only the first %d are read" % (len(infos), limits["members"]))
            infos = infos[: limits["members"]]
        total = 0
        os.makedirs(folder, exist_ok=True)
        for info in infos:
            name = info.filename.replace("\\", "/")
            parts = [p for p in name.split("/") if p not in ("", ".")]
            if name.startswith("/") or ".." in parts or not parts:
                problems.append("%s: refused, the member name leaves the archive's folder" % info.filename)
                continue
            if stat.S_ISLNK(info.external_attr >> 16):
                problems.append("%s: refused, a symbolic link" % info.filename)
                continue
            if info.file_size > limits["member_bytes"]:
                problems.append(
                    "%s: %d MB unpacked is over the limit of %d MB"
                    % (info.filename, info.file_size // 2**20, limits["member_bytes"] // 2**20)
                )
                continue
            target = os.path.join(folder, *parts)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            written = 0
            try:
                with archive.open(info) as src, open(target, "xb") as dst:
                    while True:
                        block = src.read(1 << 20)
                        if not block:
                            break
                        written += len(block)
                        total += len(block)
                        if written > limits["member_bytes"] or total > limits["total_bytes"]:
                            raise ValueError(
                                "it unpacks to more than the archive limit of %d MB" % (limits["total_bytes"] // 2**20)
                            )
                        dst.write(block)
            except (ValueError, RuntimeError, zipfile.BadZipFile, zlib.error, OSError) as exc:
                problems.append("%s: %s" % (info.filename, exc))
                try:
                    os.unlink(target)
                except OSError:
                    pass
                if total > limits["total_bytes"]:
                    break
                continue
            out.append(("/".join(parts), target))
    return out, problems


def convert(path, out, name, limits):
    """Convert ``path`` (shown as ``name``) to markdown in ``out``; a summary of what happened."""
    problems, members = [], []
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if name.lower().endswith(".zip"):
        entries, problems = _unpack(path, out + ".d", limits)
        parts = []
        for member, member_path in entries:
            try:
                kind, text = _one(member_path, member)
            except Exception as exc:  # noqa: BLE001 - one unreadable member does not stop the rest
                problems.append("%s: %s" % (member, exc))
                continue
            members.append(member)
            parts.append("\n\n<!-- member: %s -->\n%s" % (member, text.strip()))
        kind, markdown = "zip", "".join(parts).strip()
    else:
        kind, markdown = _one(path, name)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(markdown)
    return {"kind": kind, "chars": len(markdown), "problems": problems, "members": members}
