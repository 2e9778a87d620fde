"""Reference demonstrations: the agent graph driven by a policy that knows the gold evidence.

A cold start needs many well-formed, correct trajectories, and a small teacher on a CPU yields few
(qwen2.5-coder-0.5b answers ~20% of Factbook questions correctly at ~2 trajectories a minute here).
Gold-path demonstrations fill the gap, as agentic-search SFT warm starts commonly do.  They must show
*research*, not one search with the whole question: a student copies the moves it is shown, and the
first reference policy (search with the question, else open the gold chunk) taught one search and
an answer, so the student never searched twice and got none of the two-hop questions.

So for the question kinds of ``synth.qa`` the policy follows a per-hop script, as a person would:

- each hop is one search naming the hop's known entity and relation ("Kenya border countries",
  "Rome capital of which country", "Italy population"), in wording drawn per question;
- a fact counts as found only when one line of a real result shows it (the hop's entity and the
  value on the same line), and the bridge entity of a two-hop question is read that way before the
  second hop's search names it;
- when the snippets do not show the fact, the policy reformulates once or opens the document (only
  one a result has shown) and uses ``find`` for the line that holds it (``Population:``);
- the answer cites the lines the hops were read from, and appears only after they were shown.

Every observation is a real tool result.  A script whose evidence never shows the answer ends
with "not found", which the usual filters drop.  Items of other kinds (or without one) get the
general fallback: search with the question, answer from a result that shows the answer, else open
the gold chunk.  The scripts need the whole transcript, so in managed context (where earlier turns
are not shown again) every item gets the fallback.
"""

from __future__ import annotations

import random
import re
from collections.abc import Generator

from research_agent.actions import parse_action
from research_agent.inference.policy import Generation

_QUESTION = re.compile(r"Question: (.+?)(?:<\|im_end\|>|<\|eot_id\|>|\n|$)")
_HIT = re.compile(r"^\[([^\]\s]+#\d+)\][^\n]*", re.MULTILINE)
_FIND = re.compile(r"^L\d+ \[([^\]\s]+#\d+)\]: [^\n]*", re.MULTILINE)
_RESULT = re.compile(r"<result>\n?(.*?)</result>", re.DOTALL)
_CALLS_LEFT = re.compile(r"\((\d+) tool calls left\)")
_MANAGED = "Earlier turns are not shown again"  # prompts.NOTES_HELP
NOT_FOUND = "<answer>not found</answer>"

# Query wordings per relation ({e}: the hop's known entity); one is drawn per question and hop, a
# second one is the reformulation.  The student should learn the move, not one template.
QUERIES = {
    "capital": ("{e} capital", "capital of {e}", "{e} capital city", "what is the capital of {e}"),
    "population": ("{e} population", "population of {e}", "{e} number of people", "how many people live in {e}"),
    "area": ("{e} area", "total area of {e}", "{e} area sq km", "how large is {e}"),
    "region": ("{e} region", "{e} location region of the world", "which region is {e} in", "{e} map region"),
    "country-of-capital": ("{e} capital of which country", "country with capital {e}", "{e} capital city country",
                           "which country has the capital {e}"),
    "borders": ("{e} border countries", "countries bordering {e}", "{e} borders", "which countries border {e}"),
    "borders-pair": ("countries bordering {e}", "country that borders {e}", "{e} border countries",
                     "which country borders {e}"),
}
# The line of a Factbook profile that holds each relation (what ``find`` looks for after ``open``).
LABELS = {"capital": "Capital:", "population": "Population:", "area": "Area:", "region": "Region:",
          "country-of-capital": "Capital:", "borders": "Border countries"}
SINGLE = ("capital", "population", "area", "region")
TWO_HOP = ("borders-both", "capital-of-bordering", "population-of-capital-country")
KINDS = (*SINGLE, "country-of-capital", *TWO_HOP)

Script = Generator[str, str, None]


class ReferencePolicy:
    """A policy backend whose next action is decided from the gold data of the question.

    ``names`` maps document ids to entity names (a Factbook profile's country); the two-hop scripts
    use it to name each bordering country on its own.  Without it the names are read off the question.

    ``state_bridges``: a two-hop script writes the bridge it read in a short ``<think>`` before the
    turn that uses it ("<think>Russia borders both.</think><search>capital of Russia</search>").
    Without it the bridge appears only inside the next query, and a student trained on such
    demonstrations (research-qwen-v2) mostly skips the intersection: asked for the capital of the
    country bordering X and Y, it searches X's capital.
    """

    name = "reference"

    def __init__(self, tokenizer, items: list[dict], *, names: dict[str, str] | None = None, seed: int = 0,
                 state_bridges: bool = False):
        self.tokenizer = tokenizer
        self.items = {it["question"].strip(): it for it in items}
        self.names = names or {}
        self.seed = seed
        self.state_bridges = state_bridges

    def generate(self, prompts, *, max_new_tokens=128, temperature=0.0, stop=None, stop_loops=False) -> list[Generation]:
        out = []
        for p in prompts:
            text = self.next_action(self.tokenizer.decode(p, skip_special_tokens=False))
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            out.append(Generation(text, ids, [0.0] * len(ids), "stop"))
        return out

    def next_action(self, transcript: str) -> str:
        asked = _QUESTION.findall(transcript)  # the last one: the prompt's example asks one too
        item = self.items.get(asked[-1].strip()) if asked else None
        if item is None:
            return "I cannot find this question."  # becomes an invalid turn; the filter drops it
        if item.get("kind") in KINDS and _MANAGED not in transcript and _has_docs(item):
            tail = transcript[transcript.rfind("Question: "):]
            return _replay(self._script(item), _RESULT.findall(tail))
        return _fallback(item, transcript)

    # ---- the research scripts ---------------------------------------------------------------------
    def _script(self, item: dict) -> Script:
        ep = _Episode(random.Random(f"{self.seed}:{item.get('id') or item['question']}"))
        kind, answer = item["kind"], item["answers"][0]
        docs = item.get("supporting_docs") or []
        entities = [r.get("entity", "") for r in item.get("rubrics") or []]
        if kind in SINGLE:
            entity = self._name(docs[0] if docs else "", _single_entity(item["question"]))
            cites = yield from _lookup(ep, kind, entity, answer, docs[0] if docs else "")
        elif kind == "country-of-capital":
            capital = _after(item["question"], "has ", " as its capital")
            cites = yield from _lookup(ep, kind, capital, answer, docs[0] if docs else "")
        elif kind == "population-of-capital-country":
            capital = _after(item["question"], "whose capital is ", "?")
            country = entities[0] if entities else ""
            bridge = yield from _lookup(ep, "country-of-capital", capital, country, docs[0])
            said = self._say(f"{capital} is the capital of {country}.")
            cites = bridge and (yield from _lookup(ep, "population", country, answer, docs[0], said))
            cites = bridge + cites if bridge and cites else None
        else:  # borders-both, capital-of-bordering: docs are [the bordering country, X, Y]
            country = answer if kind == "borders-both" else (entities[0] if entities else "")
            pair = _after(item["question"], "borders both ", "?")
            x, y = self._pair(pair, docs)
            bridge = yield from _bordering(ep, pair, (x, docs[1]), (y, docs[2]), country)
            said = self._say(f"{country} borders both.")
            if not bridge:
                cites = bridge
            elif kind == "borders-both":
                yield said + _answer(answer, bridge)
                return
            else:
                found = yield from _lookup(ep, "capital", country, answer, docs[0], said)
                cites = bridge + found if found else None
        yield _answer(answer, cites) if cites else NOT_FOUND

    def _say(self, bridge: str) -> str:
        return f"<think>{bridge}</think>\n" if self.state_bridges else ""

    def _name(self, doc_id: str, fallback: str) -> str:
        return self.names.get(doc_id) or fallback

    def _pair(self, pair: str, docs: list[str]) -> tuple[str, str]:
        """The two countries of "X and Y", by the documents' names where known (a name may hold "and")."""
        x, y = self.names.get(docs[1]), self.names.get(docs[2])
        if x and y:
            return x, y
        left, _, right = pair.partition(" and ")
        return left, right


class _Episode:
    """The script's view of one run: its random draws and every result shown so far."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.results: list[str] = []

    def ask(self, action: str) -> Script:
        obs = yield action
        self.results.append(obs)
        return obs

    def shown(self, doc: str) -> bool:
        return any(f"[{doc}#" in r or f"({doc})" in r for r in self.results)


def _has_docs(item: dict) -> bool:
    """The scripts name documents by position (synth.qa: a border question's docs are the bordering
    country, X and Y); an item of a known kind made elsewhere without them gets the fallback."""
    need = 3 if item["kind"] in ("borders-both", "capital-of-bordering") else 1
    return len(item.get("supporting_docs") or []) >= need and bool(item.get("answers"))


def _lookup(ep: _Episode, relation: str, entity: str, target: str, doc: str, said: str = "") -> Script:
    """One hop: a shown line that states the fact (``entity``'s ``relation`` is ``target``); the ids
    to cite, or [] when neither the snippets nor the opened document's lines show it.  ``said``
    (a stated bridge) opens the hop's first turn."""
    first, second = ep.rng.sample(QUERIES[relation], 2)
    needles = _hit_needles(relation, entity, target)
    obs = yield from ep.ask(f"{said}<search>{first.format(e=entity)}</search>")
    cite = _line_with(obs, _HIT, *needles)
    if cite:
        return [cite]
    if ep.rng.random() < 0.5 and _calls_left(obs) > 3:  # reformulate, with room left to read the page
        obs = yield from ep.ask(f"<search>{second.format(e=entity)}</search>")
        cite = _line_with(obs, _HIT, *needles)
        if cite:
            return [cite]
    if doc and ep.shown(doc) and _calls_left(obs) >= 2:  # only a document a result has named
        yield from ep.ask(f"<open>{doc}</open>")
        obs = yield from ep.ask(f"<find>{LABELS[relation]}</find>")
        cite = _line_with(obs, _FIND, _find_needle(relation, entity, target))
        if cite:
            return [cite]
    return []


def _hit_needles(relation: str, entity: str, target: str) -> tuple[str, ...]:
    """What one result line must show to state the fact.  Both names, and for a capital the word
    (wiki leads say "Niamey is the capital and largest city of Niger"); a region only as the
    profile's field, so "Africa" in "... from East Africa settled ..." is not Zambia's region."""
    if relation in ("capital", "country-of-capital"):
        return (target, entity, "capital")
    if relation == "region":
        return (entity, f"Region: {target}")
    return (target, entity)


def _find_needle(relation: str, entity: str, target: str) -> str:
    """The opened profile is the entity's own, so its field line alone states the fact."""
    if relation == "country-of-capital":
        return f"{LABELS[relation]} {entity}"
    if relation in ("capital", "region"):
        return f"{LABELS[relation]} {target}"
    return target


def _bordering(ep: _Episode, pair: str, x: tuple[str, str], y: tuple[str, str], country: str) -> Script:
    """The country bordering both X and Y, read off real results: one search for the pair, and if
    no line shows it bordering both, each side's border list on its own (opened where needed)."""
    query = ep.rng.choice(QUERIES["borders-pair"]).format(e=pair)
    obs = yield from ep.ask(f"<search>{query}</search>")
    cite = _line_with(obs, _HIT, country, x[0], y[0])
    if cite:
        return [cite]
    cites = []
    for name, doc in ep.rng.sample([x, y], 2):
        found = yield from _lookup(ep, "borders", name, country, doc)
        if not found:
            return []
        cites += found
    return cites


def _replay(script: Script, observations: list[str]) -> str:
    """The script's next action after the observations so far: a deterministic script fed the same
    results takes the same steps, so the policy needs no state between turns."""
    action = next(script)
    for obs in observations:
        if action.startswith("<answer>"):
            break
        try:
            action = script.send(obs)
        except StopIteration:
            return NOT_FOUND
    return action


def _line_with(obs: str, pattern: re.Pattern, *needles: str) -> str | None:
    """The id on the first result line that shows every needle (case-insensitive)."""
    wanted = [n.lower() for n in needles if n]
    for m in pattern.finditer(obs):
        line = m.group(0).lower()
        if wanted and all(n in line for n in wanted):
            return m.group(1)
    return None


def _calls_left(obs: str) -> int:
    m = _CALLS_LEFT.findall(obs)
    return int(m[-1]) if m else (0 if "no tool calls left" in obs else 99)


def _answer(answer: str, cites: list[str]) -> str:
    ids = " ".join(f"[{c}]" for c in dict.fromkeys(cites))
    return f"<answer>{answer} {ids}</answer>"


def _after(text: str, start: str, end: str) -> str:
    i = text.find(start)
    if i < 0:
        return text
    rest = text[i + len(start):]
    j = rest.rfind(end)
    return rest[:j] if j >= 0 else rest


def _single_entity(question: str) -> str:
    for start, end in (("capital of ", "?"), ("population of ", "?"), ("total area of ", "?"), ("world is ", "?")):
        if start in question:
            return _after(question, start, end)
    return question


def _fallback(item: dict, transcript: str) -> str:
    """Search with the question; answer from a result that shows the answer, else open the gold chunk."""
    turns = transcript.count("<result>") - transcript.count("Example:")  # the prompt's example has one
    answers = [a for a in item.get("answers", []) if a]
    results = transcript.split("<result>")
    last = results[-1] if turns > 0 else ""
    if turns <= 0:
        return f"<search>{item['question']}</search>"
    for line in _HIT.finditer(last):  # a search result that shows the answer
        for a in answers:
            if a.lower() in line.group(0).lower():
                return f"<answer>{a} [{line.group(1)}]</answer>"
    supporting = item.get("supporting") or []
    opened = re.findall(r"<open>(.*?)</open>", transcript)
    target = next((c for c in reversed(supporting) if c not in opened), None)
    if any(a.lower() in last.lower() for a in answers) and opened:
        return f"<answer>{answers[0]} [{opened[-1]}]</answer>"
    if target is not None:
        return f"<open>{target}</open>"
    return NOT_FOUND


def check_demo(text: str) -> bool:
    """A reference turn is always a single valid action (guards the format the student learns)."""
    return parse_action(text).valid
