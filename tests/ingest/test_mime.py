"""MIME parsing: never crashes on hostile input, deterministic ids, safe file names."""
from email.message import EmailMessage

from hypothesis import given, settings, strategies as st

from synedre.ingest import mime


@given(st.binary(max_size=4000))
@settings(max_examples=300, deadline=None)
def test_arbitrary_bytes_parse_or_fail_cleanly(raw):
    try:
        parsed = mime.parse(raw)
    except mime.MessageParseError:
        return
    assert parsed.message_id
    for text in [parsed.subject, parsed.envelope_from, *(v for _, v in parsed.headers)]:
        if text is not None:
            assert "\x00" not in text
            text.encode("utf-8")  # storable: no lone surrogates


@given(st.binary(min_size=1, max_size=2000))
@settings(max_examples=100, deadline=None)
def test_synthetic_message_id_is_a_function_of_the_bytes(raw):
    assert mime.synthetic_message_id(raw) == mime.synthetic_message_id(bytes(raw))
    assert mime.synthetic_message_id(raw) != mime.synthetic_message_id(raw + b"x")


def test_missing_message_id_gets_the_same_synthetic_id_every_time():
    raw = b"From: a@b.c\r\nSubject: hi\r\n\r\nbody\r\n"
    one, two = mime.parse(raw), mime.parse(raw)
    assert one.synthetic_id and one.message_id == two.message_id
    assert one.message_id == mime.fallback_headers(raw)[0]


@given(st.text(max_size=200))
def test_stored_names_never_escape_the_directory(name):
    a = mime.Attachment(7, name, "application/octet-stream", b"")
    assert "/" not in a.stored_name and not a.stored_name.startswith(".")
    assert a.stored_name.startswith("0007-")


def test_attachments_inline_images_and_forwarded_messages_are_found():
    inner = EmailMessage()
    inner["Subject"] = "original"
    inner.set_content("quoted")
    msg = EmailMessage()
    msg["From"] = "Julien <julien@atelier-moreau.fr>"
    msg["Message-ID"] = "<x@y>"
    msg.set_content("cover")
    msg.add_attachment(b"\x89PNG fake", maintype="image", subtype="png", filename="../../etc/passwd.png")
    msg.add_attachment(inner)
    parsed = mime.parse(msg.as_bytes())
    kinds = [(a.content_type, a.filename) for a in parsed.attachments]
    assert kinds == [("image/png", "../../etc/passwd.png"), ("message/rfc822", "forwarded.eml")]
    assert parsed.attachments[0].stored_name == "0000-etc_passwd.png"
    assert parsed.envelope_from == "julien@atelier-moreau.fr"


def test_thousands_of_parts_and_deep_nesting_do_not_crash():
    parts = "".join(f"--b\r\nContent-Type: application/octet-stream\r\n\r\n{i}\r\n" for i in range(3000))
    raw = f"From: a@b.c\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n{parts}--b--\r\n".encode()
    assert len(mime.parse(raw).attachments) == 3000
    nested = b"Content-Type: text/plain\r\n\r\nx\r\n"
    for depth in range(300):
        nested = (f"Content-Type: multipart/mixed; boundary=n{depth}\r\n\r\n--n{depth}\r\n".encode()
                  + nested + f"\r\n--n{depth}--\r\n".encode())
    mime.parse(b"From: a@b.c\r\n" + nested)  # parses or raises MessageParseError, never crashes


def test_undecodable_header_bytes_become_storable_text():
    raw = b"From: \xff\xfe <a@b.c>\r\nSubject: =?x-unknown?q?caf=E9?= \xe9\x00t\xc3\r\n\r\nbody"
    parsed = mime.parse(raw)
    assert "\x00" not in parsed.subject
    parsed.subject.encode("utf-8")


def test_body_text_prefers_plain_and_strips_html_even_with_an_unknown_charset():
    alt = (b"Content-Type: multipart/alternative; boundary=b\r\n\r\n--b\r\nContent-Type: text/html\r\n\r\n"
           b"<p>html</p>\r\n--b\r\nContent-Type: text/plain\r\n\r\nplain text\r\n--b--\r\n")
    assert mime.body_text(alt).strip() == "plain text"
    broken = b"Content-Type: text/html; charset=x-nope\r\n\r\n<p>Bonjour</p><script>evil()</script>caf\xe9"
    text = mime.body_text(broken)
    assert "Bonjour" in text and "evil" not in text and "<p>" not in text


def test_rejections_are_the_spec_reasons_in_order():
    assert [r.name for r in mime.REJECTIONS] == [
        mime.Reason.NO_HEADER_BLOCK, mime.Reason.NO_FROM, mime.Reason.BINARY_BODY]
    # headerless garbage is reported as such, not as the missing From: that follows from it
    assert mime.rejection(mime.parse(b"\x00\x01\x02 garbage")).reason == mime.Reason.NO_HEADER_BLOCK


@given(st.binary(min_size=2000, max_size=6000),
       st.sampled_from([None, "utf-8", "us-ascii", "iso-8859-1", "x-unknown", "utf-16", "utf-32",
                        "shift_jis", "koi8-r"]))
@settings(max_examples=150, deadline=None)
def test_random_bytes_are_a_binary_body_whatever_charset_they_claim(body, charset):
    # hypothesis shrinks towards few distinct bytes; real garbage spreads over all 256
    body = bytes((b * 167 + i * 31) % 256 for i, b in enumerate(body))
    ctype = f"Content-Type: text/plain; charset={charset}\r\n" if charset else ""
    parsed = mime.parse(f"From: a@b.c\r\n{ctype}\r\n".encode() + body)
    assert mime.rejection(parsed).reason == mime.Reason.BINARY_BODY


def test_text_in_its_declared_charset_is_never_binary():
    text = "Bonjour, le devis coûte 1 200 € — merci ! Привет, 日本語のテキスト. " * 40
    for charset in ["utf-8", "utf-16", "utf-16-le", "utf-32", "iso-2022-jp", "shift_jis", "euc-jp",
                    "gb2312", "big5", "koi8-r", "cp1252", "iso-8859-1", "cp500"]:
        raw = (f"From: a@b.c\r\nContent-Type: text/plain; charset={charset}\r\n"
               "Content-Transfer-Encoding: 8bit\r\n\r\n").encode() + text.encode(charset, "replace")
        assert mime.rejection(mime.parse(raw)) is None, charset


def test_the_binary_check_reads_a_bounded_sample_of_the_body():
    parts = "".join(f"--b\r\nContent-Type: text/plain; charset=x-nope{i % 3}\r\n\r\n{'z' * 100}\r\n"
                    for i in range(2000))
    parsed = mime.parse(f"From: a@b.c\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n{parts}--b--\r\n"
                        .encode())
    assert parsed.body.size == mime.BINARY_SAMPLE_BYTES
    assert parsed.unknown_charsets == ["x-nope0", "x-nope1", "x-nope2"]  # listed past the sample


def test_forwarded_messages_and_attachments_are_not_body():
    raw = (b"From: a@b.c\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n"
           b"Content-Type: text/plain\r\n\r\nhello\r\n--b\r\nContent-Type: application/octet-stream\r\n\r\n"
           + bytes(range(256)) * 8 + b"\r\n--b\r\nContent-Type: message/rfc822\r\n\r\nFrom: x@y.z\r\n\r\n"
           + bytes(range(256)) * 8 + b"\r\n--b--\r\n")
    parsed = mime.parse(raw)
    assert parsed.body.size == len(b"hello") and mime.rejection(parsed) is None
