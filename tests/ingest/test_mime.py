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
