"""ClientResolution: envelope first, then a forwarded From:, never a consumer or founder domain."""
from synedre.approvals.decisions import not_the_founders
from synedre.classify.resolution import envelope_client, follow, resolve
from synedre.classify.split import split_cover_quoted
from synedre.db.directory import Client, Directory

D = Directory(
    founder_emails=frozenset({"julien@atelier-moreau.fr"}), founder_domain="atelier-moreau.fr",
    atlas_address="atlas@atelier-moreau.fr",
    clients={"garage-martin": Client(1, "garage-martin", "Garage Martin", "normal", 1200, "active",
                                     ("garage-martin.fr",)),
             "boulangerie-dupont": Client(2, "boulangerie-dupont", "Boulangerie", "high", 450, "active",
                                          ("boulangerie-dupont.fr",))},
    persons={"jean.martin.garage@gmail.com": "garage-martin"})
FWD = "Regarde\n\n---------- Forwarded message ---------\nDe : Marie <marie@boulangerie-dupont.fr>\n\nbody"


def test_known_person_on_a_consumer_domain_resolves_but_the_domain_alone_does_not():
    none = split_cover_quoted("hi")
    assert resolve("jean.martin.garage@gmail.com", none, D).client_codename == "garage-martin"
    assert resolve("someone@gmail.com", none, D).source == "unknown"


def test_client_domain_and_subdomain_resolve_from_the_envelope():
    none = split_cover_quoted("hi")
    r = resolve("x@garage-martin.fr", none, D)
    assert (r.client_codename, r.source) == ("garage-martin", "envelope")
    assert resolve("x@atelier.garage-martin.fr", none, D).client_codename == "garage-martin"
    assert resolve("x@evil-garage-martin.fr", none, D).source == "unknown"


def test_founder_forward_resolves_from_the_forwarded_sender():
    r = resolve("julien@atelier-moreau.fr", split_cover_quoted(FWD), D)
    assert (r.client_codename, r.source, r.is_forward) == ("boulangerie-dupont", "forwarded-body", True)


def test_the_founders_domain_is_never_a_client_and_an_unresolved_forward_stays_unknown():
    assert resolve("colleague@atelier-moreau.fr", split_cover_quoted("hi"), D).source == "unknown"
    r = resolve("julien@atelier-moreau.fr", split_cover_quoted(FWD.replace("boulangerie-dupont.fr", "x.test")), D)
    assert (r.client_codename, r.source, r.is_forward) == (None, "unknown", True)


def test_privileges_only_ever_come_from_the_envelope():
    assert envelope_client("offres@evil-promo.test", D) is None
    assert resolve("offres@evil-promo.test", split_cover_quoted(FWD), D).source == "forwarded-body"
    assert envelope_client("julien@atelier-moreau.fr", D) is None


def test_a_follow_up_without_a_client_of_its_own_has_the_followed_messages_only_when_it_is_the_founders():
    garage, dupont = D.by_id(1), D.by_id(2)
    recap = split_cover_quoted("Et le téléphone ?\n\nLe 2 déc., Atlas <atlas@atelier-moreau.fr> a écrit :\n> fait")
    mine = resolve("julien@atelier-moreau.fr", recap, D)
    assert (mine.client_codename, mine.source) == (None, "unknown")
    r = follow(mine, garage)
    assert (r.client_codename, r.source) == ("garage-martin", "follows")
    assert follow(mine, None) == mine  # the followed message had no client either
    # a client it names itself (a forward in the thread) is never replaced
    forwarded = resolve("julien@atelier-moreau.fr", split_cover_quoted(FWD), D)
    assert follow(forwarded, garage) == forwarded and D.by_id(2) is dupont and D.by_id(99) is None
    # the classify stage inherits only for his own signed mail
    raw = b"From: Julien <julien@atelier-moreau.fr>\r\nTo: atlas@atelier-moreau.fr\r\n\r\nhi\r\n"
    founder = frozenset({"julien@atelier-moreau.fr"})
    assert not_the_founders(raw=raw, sender="julien@atelier-moreau.fr", dkim_pass=True, founder=founder) is None
    assert not_the_founders(raw=raw, sender="julien@atelier-moreau.fr", dkim_pass=False,
                            founder=founder) == "not_dkim_verified"
    assert not_the_founders(raw=raw, sender="x@garage-martin.fr", dkim_pass=True,
                            founder=founder) == "not_from_the_founder"
