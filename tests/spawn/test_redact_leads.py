"""Pass 2 tries its combined regex only where the lead automaton says a lead may start
(synedre/redact/leads.py). These hold that to the plain scan it replaced: every position
where the combined regex matches is one the automaton gives, whatever the text, so the
redaction is the same, markers and values learned included."""
import re

from hypothesis import example, given, settings, strategies as st

from synedre.redact import Redactor, leads
from synedre.redact.rules import RULES, _loosen, _precise, union
from tests.spawn.test_redact_fast_paths import SHAPES

# Pieces of every rule's lead in odd cases, the characters their boundaries look at, and the
# non-ASCII letters a case-insensitive ASCII letter matches.
FRAGMENTS = sorted({f for r in RULES for f in (r.lead[:3], r.lead[:6])} | {
    "sk-ant-", "PaSsWoRd", "paſſword", "toKen", "\u212aey", "Auth", "AUTHOR", "--api-key=", " -u ", "-p",
    "://u:", "@", "12345678:", "=", ": ", '"', "\\", "\\n", "\n", " ", "_", "x", "A" * 5, "0" * 8})
texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS + SHAPES), st.text(max_size=6)), max_size=12).map("".join)


class PlainScan(Redactor):
    """Pass 2 as it was: `search` from each position on."""

    def _rules(self, s: str) -> str:
        out, done, pos, markers = [], 0, 0, "[REDACTED" in s
        rules, order = union()
        while m := rules.search(s, pos):
            at = m.start()
            for i in order[m.lastgroup]:  # type: ignore[index]
                rx, hidden, kept = _precise(i)
                if (hit := rx.match(s, at)) and (
                        replaced := self._replace(i, hit, hidden, kept, markers)) is not None:
                    out += [s[done:at], replaced]
                    done = pos = hit.end()
                    break
            else:
                pos = at + 1
        return "".join(out) + s[done:] if out else s


@settings(max_examples=200, deadline=None)
@given(texts)
@example("PaSsWoRd=xyz12345")
@example("paſſword: Zx9-Qm2_Lp7vW")
@example("x \u212aEY=abc123def")
@example("toKen: abcdefgh12")
@example("curl -u admin:hunter2Xy9 https://h")
def test_every_position_where_the_combined_regex_matches_is_one_the_automaton_gives(s):
    rules, _ = union()
    matched = {at for at in range(len(s) + 1) if rules.match(s, at)}
    assert matched <= set(leads.starts(s))


@settings(max_examples=200, deadline=None)
@given(st.lists(texts, min_size=1, max_size=4))
@example(["PaSsWoRd=xyz12345 and again xyz12345", "x \u212aEY=abc123def"])
def test_redaction_through_the_automaton_hides_and_learns_what_the_plain_scan_does(strings):
    fast, plain = Redactor(["S3cretPassw0rd-db"]), PlainScan(["S3cretPassw0rd-db"])
    for s in strings:
        assert fast.redact_text(s) == plain.redact_text(s)
    assert fast._remembered == plain._remembered


def test_the_cases_of_a_letter_are_every_character_that_matches_it_case_insensitively():
    everything = "".join(map(chr, [*range(0xD800), *range(0xE000, 0x110000)]))
    for c in {ch for r in RULES for t in leads.lead_texts(r.lead + _loosen(r.body)) for ch in t}:
        found = set(re.findall(f"(?i:{re.escape(c)})", everything))
        assert found == set(leads._cases(c)), c


def test_a_lead_s_texts_are_cut_at_the_first_part_that_is_not_literal():
    assert leads.lead_texts("sk\\-(?<![a-z]sk\\-)[A-Za-z]{20,}") == {"sk-"}
    assert leads.lead_texts("-(?<=[ ]-)(?:u|-user)[ =]+") == {"-u", "--us"}
    assert leads.lead_texts("t(?i:oken)") == {"t" + o + k + e for o in "oO" for k in "kK\u212a" for e in "eE"}
    assert leads.lead_texts(":(?<=[0-9]{8}:)(?P<v>[A-Z]{35})") == {":"}
