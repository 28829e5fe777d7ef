"""COVER/QUOTED split and the forwarded sender, on what real mail clients write (FR/EN)."""
import email
import email.policy

import pytest
from hypothesis import assume, given, settings, strategies as st

from synedre.classify.split import MARKERS, Split, forwarded_sender, split_cover_quoted
from tests.services.stack import CORPUS

CASES = CORPUS / "cases"
FORWARD_KINDS = {kind for kind, is_forward, _ in MARKERS if is_forward}

# (id, cover, quoted, marker, sender); the body is cover + blank line + quoted.
EXAMPLES = [
    ("gmail-en", "Can you look at this today?\n\n-- \nJulien",
     "---------- Forwarded message ---------\n"
     "From: Marie Dupont <marie@boulangerie-dupont.fr>\n"
     "Date: Mon, Nov 2, 2026 at 9:12 AM\nSubject: Order button\nTo: <julien@atelier-moreau.fr>\n\n"
     "Hi Julien,\nthe order button does nothing on mobile.\nMarie\n",
     "gmail_forward", "marie@boulangerie-dupont.fr"),
    ("gmail-fr", "Peux-tu regarder ça ?",
     "---------- Message transféré ---------\n"
     "De\u00a0: Marie Dupont <marie@boulangerie-dupont.fr>\n"
     "Date\u00a0: lun. 2 nov. 2026 à 09:12\nSubject: Bouton commander\nTo: <julien@atelier-moreau.fr>\n\n"
     "Bonjour Julien,\nle bouton ne répond plus.\n",
     "gmail_forward", "marie@boulangerie-dupont.fr"),
    ("thunderbird-fr", "Pour info.",
     "-------- Message transféré --------\nSujet : \tDevis\nDate : \tMon, 2 Nov 2026 09:12:00 +0100\n"
     "De : \tClaire Rousseau <claire@fromagerie-rousseau.test>\nPour : \tjulien@atelier-moreau.fr\n\nBonjour\n",
     "gmail_forward", "claire@fromagerie-rousseau.test"),
    ("outlook-original-en", "Big one, please plan it.",
     "-----Original Message-----\nFrom: Paul Martin [mailto:contact@garage-martin.fr]\n"
     "Sent: Tuesday, November 3, 2026 9:00 AM\nTo: Julien Moreau\nSubject: Customer area\n\nHello,\n",
     "outlook_original", "contact@garage-martin.fr"),
    ("outlook-original-fr", "Gros sujet.",
     "-----Message d'origine-----\nDe : Paul Martin [mailto:Contact@Garage-Martin.FR]\n"
     "Envoyé : mardi 3 novembre 2026 09:00\nÀ : Julien Moreau\nObjet : Espace client\n\nBonjour,\n",
     "outlook_original", "contact@garage-martin.fr"),
    ("outlook-block-underscore-en", "See below.",
     "________________________________\nFrom: Paul Martin <contact@garage-martin.fr>\n"
     "Sent: Tuesday, November 3, 2026 9:00 AM\nTo: Julien Moreau <julien@atelier-moreau.fr>\n"
     "Subject: Invoices\n\nHello,\n",
     "outlook_header_block", "contact@garage-martin.fr"),
    ("outlook-block-fr", "Voir ci-dessous.",
     "De\u00a0: \"Paul Martin\" <contact@garage-martin.fr>\nEnvoyé\u00a0: mardi 3 novembre 2026 09:00\n"
     "À\u00a0: Julien Moreau\nObjet\u00a0: Factures\n\nBonjour,\n",
     "outlook_header_block", "contact@garage-martin.fr"),
    ("apple-en", "FYI",
     "Begin forwarded message:\n\nFrom: Claire Rousseau <claire@fromagerie-rousseau.test>\n"
     "Subject: Quote request\nDate: 2 November 2026 at 09:12:00 CET\nTo: julien@atelier-moreau.fr\n\nHello,\n",
     "apple_forward", "claire@fromagerie-rousseau.test"),
    ("apple-fr", "Pour info",
     "Début du message réexpédié\u00a0:\n\nDe: Claire Rousseau <claire@fromagerie-rousseau.test>\n"
     "Objet: Demande de devis\nDate: 2 novembre 2026 à 09:12:00 UTC+1\nÀ: julien@atelier-moreau.fr\n\nBonjour,\n",
     "apple_forward", "claire@fromagerie-rousseau.test"),
    ("reply-en", "Sounds good, Thursday then.",
     "On Mon, Nov 2, 2026 at 9:12 AM Marie Dupont <marie@boulangerie-dupont.fr> wrote:\n"
     "> Can we ship on Thursday?\n> Marie\n",
     "reply_attribution", None),
    ("reply-fr-wrapped-before-ecrit", "Oui, jeudi.",
     "Le lun. 2 nov. 2026 à 09:12, Marie Dupont <marie@boulangerie-dupont.fr> a\nécrit :\n"
     "> On livre jeudi ?\n",
     "reply_attribution", None),
    ("reply-fr-wrapped-before-address", "Oui, jeudi.",
     "Le 2 nov. 2026 à 09:12, Marie Dupont\n<marie@boulangerie-dupont.fr> a écrit\u00a0:\n\n> On livre jeudi ?\n",
     "reply_attribution", None),
    ("quote-prefix", "Agreed.",
     "> Can we ship on Thursday?\n> Marie\n", "quote_prefix", None),
    ("reply-quoting-a-forward", "Vu, je m'en occupe.",
     "On 2 Nov 2026, at 10:00, Julien Moreau <julien@atelier-moreau.fr> wrote:\n\n"
     "> ---------- Forwarded message ---------\n> From: Marie Dupont <marie@boulangerie-dupont.fr>\n"
     "> Subject: Bouton\n>\n> Bonjour\n",
     "reply_attribution", "marie@boulangerie-dupont.fr"),
    ("quoted-forward-headers", "",
     "> ---------- Message transféré ---------\n> De : Marie Dupont <marie@boulangerie-dupont.fr>\n"
     "> Date: lun. 2 nov. 2026\n>\n> Bonjour\n",
     "gmail_forward", "marie@boulangerie-dupont.fr"),
]

NO_MARKER = [
    "On lance le chantier ?\nLe devis a été validé le 3 novembre.\nMerci",
    "Le client a écrit : « c'est urgent », tu peux regarder ?\n",
    "Merci\n________________________________\nJulien Moreau | Atelier Moreau\n",
    "De : 10h à 12h, je suis dispo.\nÀ bientôt\n",
    "",
]


def _eol(text: str, newline: str) -> str:
    return text.replace("\n", newline)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("case", EXAMPLES, ids=[case[0] for case in EXAMPLES])
def test_each_client_style_splits_at_its_marker(case, newline):
    _, cover, quoted, marker, sender = case
    body = _eol(cover + "\n\n" + quoted, newline)
    split = split_cover_quoted(body)
    assert split == Split(_eol(cover, newline), _eol(quoted, newline), marker, marker in FORWARD_KINDS)
    assert forwarded_sender(split.quoted) == sender


@pytest.mark.timeout(60)
@pytest.mark.parametrize("body", NO_MARKER)
def test_prose_that_looks_like_a_marker_stays_cover(body):
    assert split_cover_quoted(body) == Split(body, "", None, False)


@pytest.mark.timeout(60)
def test_first_marker_wins_over_a_later_one():
    body = "ok\n\n> quoted reply line\n\n---------- Forwarded message ---------\nFrom: a@b.fr\n"
    split = split_cover_quoted(body)
    assert (split.cover, split.marker, split.is_forward) == ("ok", "quote_prefix", False)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("line, expected", [
    ("From: Marie Dupont <marie@boulangerie-dupont.fr>", "marie@boulangerie-dupont.fr"),
    ('De : "Marie Dupont" <Marie@Boulangerie-Dupont.fr>', "marie@boulangerie-dupont.fr"),
    ("From: contact@garage-martin.fr", "contact@garage-martin.fr"),
    ("De: Paul Martin [mailto:contact@garage-martin.fr]", "contact@garage-martin.fr"),
    ("> > De\u00a0: Paul <contact@garage-martin.fr>\r", "contact@garage-martin.fr"),
    ("From: Paul <contact@garage-martin.fr<mailto:contact@garage-martin.fr>>", "contact@garage-martin.fr"),
    ('From: "marie@boulangerie-dupont.fr via Promo" <offres@evil-promo.test>', "offres@evil-promo.test"),
    ("From: Paul Martin", None),
    ("Subject: not a sender line", "later@elsewhere.fr"),
])
def test_forwarded_sender_reads_the_first_from_line(line, expected):
    quoted = "---------- Forwarded message ---------\n" + line + "\nFrom: later@elsewhere.fr\n"
    assert forwarded_sender(quoted) == expected


@pytest.mark.timeout(60)
@pytest.mark.parametrize("quoted", ["", "> Can we ship on Thursday?\n", "Subject: hi\n\nFrom now on, ok.\n"])
def test_forwarded_sender_is_none_without_a_from_line(quoted):
    assert forwarded_sender(quoted) is None


def _plain_body(name: str) -> str:
    raw = (CASES / name).read_bytes()
    return email.message_from_bytes(raw, policy=email.policy.default).get_body(("plain",)).get_content()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name, marker, cover_end, sender", [
    ("P01-founder-forward-run.eml", "gmail_forward", "SYN-CASE-P01", "marie@boulangerie-dupont.fr"),
    ("P21-founder-forward-run-plan.eml", "outlook_original", "SYN-CASE-P21", "contact@garage-martin.fr"),
    ("P09-body-forged-client-stays-noise.eml", "gmail_forward", "", "contact@garage-martin.fr"),
    ("P10-self-forward-atlas-recap-dkim.eml", "gmail_forward", "SYN-CASE-P10", "atlas@atelier-moreau.fr"),
])
def test_corpus_forwards(name, marker, cover_end, sender):
    split = split_cover_quoted(_plain_body(name))
    assert (split.marker, split.is_forward) == (marker, True)
    assert split.cover.endswith(cover_end)
    assert forwarded_sender(split.quoted) == sender


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["P02-client-direct-question.eml", "P07-founder-screenshot-false-noise.eml",
                                  "P16-invalid-intent-fails-closed.eml", "P19-prompt-injection.eml"])
def test_corpus_direct_mail_is_all_cover(name):
    body = _plain_body(name)
    assert split_cover_quoted(body) == Split(body, "", None, False)


@pytest.mark.timeout(60)
@given(st.text())
@settings(max_examples=300, deadline=None)
def test_split_is_a_cut_of_the_body(body):
    # Invariant: body == cover + whitespace + quoted, exactly; nothing is rewritten.
    split = split_cover_quoted(body)
    assert body.startswith(split.cover) and body.endswith(split.quoted)
    assert body[len(split.cover):len(body) - len(split.quoted)].strip() == ""
    assert (split.marker is None) == (split.quoted == "")
    assert split.is_forward == (split.marker in FORWARD_KINDS)
    forwarded_sender(split.quoted)


FROM_FORMATS = ["{name} <{addr}>", '"{name}" <{addr}>', "{addr}", "{name} [mailto:{addr}]"]
# Each style: (marker kind, block template); {from} is the header value, {q} the quote prefix.
STYLES = [
    ("gmail_forward", "{q}---------- Forwarded message ---------\n{q}From: {from}\n{q}Date: Mon, Nov 2, 2026\n"
                      "{q}Subject: Hello\n{q}To: <julien@atelier-moreau.fr>\n{q}\n{q}Body text\n"),
    ("gmail_forward", "{q}---------- Message transféré ---------\n{q}De\u00a0: {from}\n{q}Date\u00a0: lun. 2 nov.\n"
                      "{q}Subject: Bonjour\n{q}\n{q}Texte\n"),
    ("outlook_original", "{q}-----Original Message-----\n{q}From: {from}\n{q}Sent: Tuesday\n{q}To: Julien\n"
                         "{q}Subject: Hi\n{q}\n{q}Text\n"),
    ("outlook_original", "{q}-----Message d'origine-----\n{q}De : {from}\n{q}Envoyé : mardi\n{q}À : Julien\n"
                         "{q}Objet : Salut\n{q}\n{q}Texte\n"),
    ("outlook_header_block", "{q}________________________________\n{q}From: {from}\n{q}Sent: Tuesday\n"
                             "{q}To: Julien\n{q}Subject: Hi\n{q}\n{q}Text\n"),
    ("outlook_header_block", "{q}De\u00a0: {from}\n{q}Envoyé\u00a0: mardi\n{q}À\u00a0: Julien\n"
                             "{q}Objet\u00a0: Salut\n{q}\n{q}Texte\n"),
    ("apple_forward", "{q}Begin forwarded message:\n{q}\n{q}From: {from}\n{q}Subject: Hi\n{q}Date: 2 Nov\n"
                      "{q}To: julien@atelier-moreau.fr\n{q}\n{q}Text\n"),
    ("apple_forward", "{q}Début du message réexpédié\u00a0:\n{q}\n{q}De: {from}\n{q}Objet: Salut\n"
                      "{q}Date: 2 nov.\n{q}\n{q}Texte\n"),
]
names = st.from_regex(r"[A-Za-zÀ-ÿ][A-Za-zÀ-ÿ' .-]{0,30}", fullmatch=True)


@pytest.mark.timeout(60)
@given(cover=st.text(), style=st.sampled_from(STYLES), fmt=st.sampled_from(FROM_FORMATS), name=names,
       addr=st.emails(), q=st.sampled_from(["", "> ", ">> "]), newline=st.sampled_from(["\n", "\r\n"]))
@settings(max_examples=300, deadline=None)
def test_generated_forward_is_found_after_any_plain_cover(cover, style, fmt, name, addr, q, newline):
    assume(split_cover_quoted(cover).marker is None)
    # A trailing underscore rule in the cover is Outlook's own separator: it rightly
    # starts the block when a From: line follows, so it cannot be "plain cover" here.
    assume(not cover.rstrip().rsplit("\n", 1)[-1].strip(" \t\r\u00a0\u202f>").startswith("________"))
    kind, template = style
    block = _eol(template.format(q=q, **{"from": fmt.format(name=name, addr=addr)}), newline)
    split = split_cover_quoted(cover + newline + newline + block)
    assert split == Split(cover.rstrip(), block, kind, True)
    assert forwarded_sender(split.quoted) == addr.lower()


HOSTILE_RUN = 200_000


@pytest.mark.timeout(60)
@pytest.mark.parametrize("body", [
    ">" + " " * HOSTILE_RUN + "x",
    "Le 1 a" + "\u00a0" * HOSTILE_RUN + "x",
    "--" + " " * HOSTILE_RUN + "Forwarded message" + " " * HOSTILE_RUN,
    "________" + " " * HOSTILE_RUN + "\n" + " " * HOSTILE_RUN,
    "From: " + "a" * HOSTILE_RUN + "@",
    ("On 1 " + "a " * 2000 + "\n") * 50,
], ids=["quote-blanks", "ecrit-blanks", "dashes-blanks", "underscore-blanks", "address-run", "on-lines"])
def test_hostile_bodies_split_in_linear_time(body):
    # Overlapping quantifiers once made a 100 kB line of blanks take minutes.
    split = split_cover_quoted(body)
    # nothing lost or invented: the cover, the blanks between, then the quoted part, as received
    assert body.startswith(split.cover) and body.endswith(split.quoted)
    assert not body[len(split.cover):len(body) - len(split.quoted)].strip()
    assert forwarded_sender(split.quoted or body) is None  # no whole address in any of them
