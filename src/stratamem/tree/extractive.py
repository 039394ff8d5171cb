"""Extractive summaries: the sentences that best cover the items' recurring terms, in order.

The summary is grown greedily as a budgeted maximum coverage of weighted terms (concept
coverage after Gillick & Favre, "A scalable global model for summarization", 2009; the greedy
with a cost exponent after Lin & Bilmes, "Multi-document summarization via budgeted
maximization of submodular functions", NAACL 2010)::

    weight(t)   = ln(1 + df(t))               df: the number of sentences holding term t
    gain(s | S) = Σ weight(t) over the terms of s that no sentence of S holds yet
    next        = argmax over s that fit of  gain(s | S) / cost(s) ** 0.5

``cost`` is the sentence's word count (a lower bound on its tokens, so only picked sentences
are counted exactly) plus its label's tokens when its line has none yet (see below). The first
pick is the most central sentence, the one holding the most of what the items keep coming back
to; each later pick is worth only what it adds, so boilerplate is taken once. A sentence whose
cosine to one already taken exceeds ``redundancy`` (on ``1 + ln tf`` term vectors) is dropped
even when it adds a term (maximal marginal relevance with a hard threshold, Carbonell &
Goldstein 1998). The greedy stops when nothing left adds a term or fits; the picks are printed
in their original order. Ties go to the earlier sentence, so the same items always give the
same summary. When no sentence holds a single term, the opening sentences are taken instead.

Terms are lower-cased word runs less stopwords, chat filler ("wow", "awesome") and the words
of the speakers' names, which the labels carry already. Sentences come from lines: a chat line
is a sentence even without final punctuation, bullet and heading markers are dropped, and
hard-wrapped prose lines are joined again. A sentence longer than the budget is cut at a word
boundary.

Who and when survive as a label before each output line: ``[2024-05-01 alice]`` for a leaf (the
speaker of a ``Name: …`` chat line, else the item's author), ``[2024-05-01..07]`` for a
summary, whose lines already labelled ``[…]`` keep their own label. Labels are dropped when the
budget is too small to carry them. Costs are counted with
:func:`~stratamem.embed.tokens.estimate_tokens`, which is additive over whitespace-joined
parts, so the output never exceeds the budget.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import chain

import numpy as np
import numpy.typing as npt

from stratamem.embed.tokens import estimate_tokens
from stratamem.entities.stopwords import STOPWORDS
from stratamem.tree.summarizer import SummaryItem

_WORD = re.compile(r"\w+")
_NON_SPACE = re.compile(r"\S+")
_SENTENCE_END = re.compile(r"[.!?…。！？]+[\"'”’)\]]*\s*")
_CJK_END = frozenset("。！？")
_SENTENCE_MARK = re.compile(r"[.!?…][\"'”’)\]]*\s|[。！？]")
_MARKER = re.compile(r"(?:[-*+•·‣▪>]|\d{1,3}[.)]|#{1,6})\s+")
_BRACKET_LABEL = re.compile(r"\[([^\[\]\n]{1,80})\]\s+")
_SPEAKER = re.compile(r"([^\s:\[\]][^:\n]{0,39}?):\s+")
_CLOSED = frozenset(".!?:;…。！？")
# A wrapped prose line fills most of its width; a shorter line is a line of its own (chat).
_WRAP_WIDTH = 40
_COST_EXPONENT = 0.5
_EMPTY = "…"

# The shared list holds contractions whole, but word runs split them into pieces; chat filler
# recurs in every conversation and would otherwise look like its topic.
_EXTRA_STOPWORDS = """
    aren couldn didn doesn don hadn hasn haven isn ll re shouldn ve wasn weren won wouldn
    absolutely agree amazing awesome bit congrats congratulations cool definitely exciting
    excited fantastic feel feels fun glad good great guess haha hahaha hey hmm im incredible
    kind lol lot lots nice nope please pretty right sound sounds stuff super thing things
    totally true way wonderful wow yup
"""
_STOPWORDS = STOPWORDS | frozenset(_EXTRA_STOPWORDS.split())


@dataclass(frozen=True, slots=True)
class _Sentence:
    text: str
    block: int
    words: list[str]


class ExtractiveSummarizer:
    """The deterministic, model-free summarizer (see the module docstring for the method)."""

    name = "extractive"

    def __init__(self, *, redundancy: float = 0.7) -> None:
        if not 0.0 < redundancy <= 1.0:
            raise ValueError(f"redundancy must be in (0, 1], got {redundancy}")
        self.redundancy = redundancy

    def summarize(self, items: Sequence[SummaryItem], *, budget: int) -> str:
        if not items:
            raise ValueError("nothing to summarise: items is empty")
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        sentences, labels, names = _split_items(items)
        if not sentences:
            return _fallback(items, budget)
        label_costs = [estimate_tokens(label) for label in labels]
        # A label costing more than half the budget would crowd out the text it labels.
        if 2 * max(label_costs) > budget:
            labels = [""] * len(labels)
            label_costs = [0] * len(labels)
        if len(items) == 1:
            whole = _render(sentences, [(i, s.text) for i, s in enumerate(sentences)], labels, 0)
            if estimate_tokens(whole) <= budget:
                # One item that fits whole (a short note): it is its own best summary.
                return whole
        vectors = _Vectors.build([s.words for s in sentences], names)
        chosen = _cover(sentences, vectors, label_costs, budget, self.redundancy)
        if not chosen:
            chosen = _in_order(sentences, label_costs, budget)
        return _render(sentences, chosen, labels, budget)


def cut_to_budget(text: str, budget: int) -> str:
    """``text`` stripped and, when over ``budget`` tokens, cut at the last word boundary that
    fits; a single word longer than the budget is cut inside."""
    text = text.strip()
    if estimate_tokens(text) <= budget:
        return text
    if budget < 1:
        return ""
    used = 0
    end = 0
    for match in _NON_SPACE.finditer(text):
        cost = estimate_tokens(match.group())
        if used + cost > budget:
            if end == 0:
                return _cut_word(match.group(), budget)
            break
        used += cost
        end = match.end()
    return text[:end].rstrip(",;:-–—(") or text[:end]


def _cut_word(word: str, budget: int) -> str:
    # The estimate of a prefix never decreases as the prefix grows, so bisect its length.
    low, high = 1, len(word)
    while low < high:
        middle = (low + high + 1) // 2
        if estimate_tokens(word[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return word[:low]


def when_label(item: SummaryItem) -> str:
    """The day of a leaf (``2024-05-01``), the day range of a summary (``2024-05-01..07``,
    ``2024-05-28..06-02``), or ``""`` when the item has no time."""
    start = item.time_start or item.time_end
    if start is None:
        return ""
    day = start.date().isoformat()
    end = item.time_end
    if item.level == 0 or end is None or end.date() == start.date():
        return day
    return f"{day}..{_short_end(start, end)}"


def _short_end(start: datetime, end: datetime) -> str:
    if end.year != start.year:
        return end.date().isoformat()
    if end.month != start.month:
        return f"{end.month:02d}-{end.day:02d}"
    return f"{end.day:02d}"


def speaker_labelled(item: SummaryItem) -> bool:
    """Whether the item is a chat window whose lines start with their speaker (``Alice: …``)."""
    if item.level != 0 or not item.author:
        return False
    pattern = rf"^[ \t]*{re.escape(item.author)}:\s"
    return re.search(pattern, item.text, re.MULTILINE) is not None


def _clean_name(name: str) -> str:
    return " ".join(name.replace("[", "(").replace("]", ")").split())


def _label(when: str, who: str | None) -> str:
    text = f"{when} {_clean_name(who)}".strip() if who else when
    return f"[{text}]" if text else ""


def _split_items(items: Sequence[SummaryItem]) -> tuple[list[_Sentence], list[str], set[str]]:
    """Every sentence with a word in it, the label of each block the sentences came from, and
    the words of the names in those labels."""
    sentences: list[_Sentence] = []
    labels: list[str] = []
    names: set[str] = set()
    for item in items:
        labelled = speaker_labelled(item)
        when = when_label(item)
        default_who = item.author if item.level == 0 and not labelled else None
        made: dict[str | None, str] = {}
        for block, tag in _blocks(item.text, labelled=labelled, summary=item.level > 0):
            if tag is not None and tag.startswith("["):
                label = tag
            else:
                who = tag if tag is not None else default_who
                label = made.get(who) or made.setdefault(who, _label(when, who))
            block_id = len(labels)
            labels.append(label)
            for text in _sentences(block):
                words = _WORD.findall(text.lower())
                if words:
                    sentences.append(_Sentence(text, block_id, words))
        if item.author:
            names.update(_WORD.findall(item.author.lower()))
    for label in set(labels):
        names.update(word for word in _WORD.findall(label.lower()) if not word.isdigit())
    return sentences, labels, names


def _blocks(text: str, *, labelled: bool, summary: bool) -> list[tuple[str, str | None]]:
    """Blocks of text (a line, a bullet, a paragraph of wrapped lines) with their speaker or
    ``[label]``, which carries over to the following lines until the next one."""
    blocks: list[tuple[str, str | None]] = []
    lines: list[str] = []
    tag: str | None = None
    current_tag: str | None = None

    def flush() -> None:
        if lines:
            blocks.append((" ".join(lines), current_tag))
            lines.clear()

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            flush()
            continue
        starts_block = True
        if summary and (match := _BRACKET_LABEL.match(line)):
            tag = f"[{match.group(1).strip()}]"
        elif labelled and (match := _SPEAKER.match(line)):
            tag = match.group(1).strip()
        elif match := _MARKER.match(line):
            pass
        else:
            starts_block = False
        if match is not None:
            line = line[match.end() :]
        if lines and not starts_block and _wraps(lines[-1]):
            lines.append(line)
            continue
        flush()
        current_tag = tag
        lines.append(line)
    flush()
    return blocks


def _wraps(line: str) -> bool:
    return len(line) >= _WRAP_WIDTH and line[-1] not in _CLOSED


def _sentences(block: str) -> list[str]:
    if _SENTENCE_MARK.search(block) is None:
        return [block]  # most chat lines: no scan needed
    out: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(block):
        end = match.end()
        if end == len(block):
            break
        mark = match.group()
        # A Latin full stop ends a sentence only before a space, and not before a lower-case
        # word ("e.g. the", "approx. two"); a CJK one ends it anywhere.
        if not (mark[-1].isspace() or _CJK_END.intersection(mark)) or block[end].islower():
            continue
        out.append(block[start:end].strip())
        start = end
    out.append(block[start:].strip())
    return [sentence for sentence in out if sentence]


@dataclass(frozen=True, slots=True)
class _Vectors:
    """Sentences as sparse rows in CSR form: row ``i`` is ``cols[indptr[i]:indptr[i+1]]``
    with L2-normalised ``weights``, ``w = 1 + ln tf``, and each term's sentence count ``df``.

    No IDF here: these vectors only tell near-duplicates apart, and log lines that differ in one
    rare id are near-duplicates, which IDF would make look unrelated."""

    rows: npt.NDArray[np.int64]
    cols: npt.NDArray[np.int64]
    weights: npt.NDArray[np.float64]
    indptr: npt.NDArray[np.int64]
    df: npt.NDArray[np.int64]

    @classmethod
    def build(cls, words: list[list[str]], names: set[str]) -> _Vectors:
        n = len(words)
        flat = list(chain.from_iterable(words))
        vocabulary = {word: i for i, word in enumerate(dict.fromkeys(flat))}
        ids = np.fromiter(map(vocabulary.__getitem__, flat), dtype=np.int64, count=len(flat))
        rows = np.repeat(np.arange(n, dtype=np.int64), [len(row) for row in words])
        # Decided once per distinct word rather than per occurrence.
        is_term = np.fromiter(
            (_is_term(word, names) for word in vocabulary), dtype=bool, count=len(vocabulary)
        )
        kept = is_term[ids]
        dim = max(len(vocabulary), 1)
        keys, counts = np.unique(rows[kept] * dim + ids[kept], return_counts=True)
        rows, cols = keys // dim, keys % dim
        df = np.bincount(cols, minlength=dim)
        weights = 1.0 + np.log(counts)
        if weights.size:
            weights /= np.sqrt(np.bincount(rows, weights * weights, minlength=n))[rows]
        indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=n))))
        return cls(rows, cols, weights, indptr, df)

    def cosines(self, index: int) -> npt.NDArray[np.float64]:
        """The cosine of every row to row ``index``."""
        start, end = self.indptr[index], self.indptr[index + 1]
        dense = np.zeros(len(self.df))
        dense[self.cols[start:end]] = self.weights[start:end]
        products = self.weights * dense[self.cols]
        return np.bincount(self.rows, products, minlength=len(self.indptr) - 1).astype(np.float64)


def _is_term(word: str, names: set[str]) -> bool:
    return word not in _STOPWORDS and word not in names and (len(word) > 1 or word.isdigit())


def _cover(
    sentences: list[_Sentence],
    vectors: _Vectors,
    label_costs: list[int],
    budget: int,
    redundancy: float,
) -> list[tuple[int, str]]:
    """(index, text) of the sentences the greedy coverage takes, in their original order; a
    text longer than the budget comes back cut."""
    n = len(sentences)
    left_weight = np.log1p(vectors.df.astype(np.float64))
    blocks = np.fromiter((s.block for s in sentences), dtype=np.int64, count=n)
    full_label = np.asarray(label_costs, dtype=np.int64)[blocks]
    label = full_label.copy()
    # Each word run is at least one token, and no sentence is kept longer than its room.
    floor = np.minimum(
        np.fromiter((len(s.words) for s in sentences), dtype=np.int64, count=n),
        budget - full_label,
    )
    alive = np.ones(n, dtype=bool)
    chosen: list[tuple[int, str]] = []
    left = budget
    while left > 0:
        gains = np.bincount(vectors.rows, left_weight[vectors.cols], minlength=n)
        cost = floor + label
        ratio = np.where(alive & (cost <= left) & (gains > 0.0), gains / cost**_COST_EXPONENT, 0.0)
        index = int(np.argmax(ratio))
        if ratio[index] <= 0.0:
            break
        alive[index] = False
        text = sentences[index].text
        tokens = estimate_tokens(text)
        room = int(budget - full_label[index])
        if tokens > room:
            text = cut_to_budget(text, room)
            tokens = estimate_tokens(text)
        if tokens + label[index] > left:
            continue
        chosen.append((index, text))
        left -= tokens + int(label[index])
        left_weight[vectors.cols[vectors.indptr[index] : vectors.indptr[index + 1]]] = 0.0
        label[blocks == blocks[index]] = 0
        alive &= vectors.cosines(index) <= redundancy
    return sorted(chosen)


def _in_order(
    sentences: list[_Sentence], label_costs: list[int], budget: int
) -> list[tuple[int, str]]:
    chosen: list[tuple[int, str]] = []
    charged: set[int] = set()
    left = budget
    for index, sentence in enumerate(sentences):
        label = 0 if sentence.block in charged else label_costs[sentence.block]
        text = cut_to_budget(sentence.text, budget - label_costs[sentence.block])
        tokens = estimate_tokens(text)
        if tokens + label > left:
            break
        chosen.append((index, text))
        charged.add(sentence.block)
        left -= tokens + label
    return chosen


def _render(
    sentences: list[_Sentence], chosen: list[tuple[int, str]], labels: list[str], budget: int
) -> str:
    lines: list[str] = []
    block = -1
    for index, text in chosen:
        if sentences[index].block != block:
            block = sentences[index].block
            lines.append(labels[block])
        lines[-1] = f"{lines[-1]} {text}".lstrip()
    # Costs add up exactly, so this cut is a guard that never bites (0: no cut).
    text = "\n".join(lines)
    return (cut_to_budget(text, budget) if budget else text) or _EMPTY


def _fallback(items: Sequence[SummaryItem], budget: int) -> str:
    for text in [item.text for item in items] + [item.title for item in items]:
        if text.strip():
            return cut_to_budget(text, budget)
    return _EMPTY
