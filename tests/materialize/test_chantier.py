"""A chantier is attached only on a confident, unambiguous match."""
from synedre.materialize.chantier import Candidate, match

CHECKOUT = Candidate(1, "Refonte du tunnel de commande",
                     "Réduire l'abandon de panier de 30 % en simplifiant le checkout en une page.")
MENU = Candidate(2, "Nouvelle carte traiteur", "Mettre en ligne la carte des buffets.")


def test_a_clear_match_attaches_and_a_weak_one_does_not():
    assert match("Le checkout perd des paniers : la commande échoue au tunnel", [CHECKOUT, MENU]) == 1
    assert match("Bonjour, une question sur les horaires", [CHECKOUT, MENU]) is None
    assert match("commande", [CHECKOUT]) is None  # one shared term is not confident


def test_a_tie_attaches_nothing():
    twin = Candidate(3, CHECKOUT.title, CHECKOUT.mission_letter)
    assert match("checkout tunnel commande panier", [CHECKOUT, twin]) is None
