import pytest

from rewards.judge import CachedJudge, LLMSupportJudge, OfflineSupportJudge, parse_yes_no

DOC = "The Eiffel Tower, completed in 1889, is 330 metres tall. It stands in Paris."


def test_offline_lexical_support():
    j = OfflineSupportJudge(use_embeddings=False)
    assert j("the eiffel tower is 330 metres tall", DOC)
    assert not j("The Eiffel Tower is 331 metres tall", DOC)  # number mismatch
    assert not j("Big Ben stands in London", DOC)
    assert not j("", DOC) and not j("claim", "")


def test_offline_numbers_normalized():
    j = OfflineSupportJudge(use_embeddings=False)
    assert j("population 1,200", "The village population: 1200 people.")


def test_offline_embedding_fallback_is_cached():
    j = OfflineSupportJudge(overlap=1.0, similarity=0.6)
    claim = "The tower is located in the French capital."
    text = "The Eiffel Tower is located in Paris, the capital of France."
    first = j(claim, text)
    assert isinstance(first, bool)
    assert j._cache[(claim, text)] == first
    # lexical overlap is not enough at overlap=1.0, so only the embedding could say yes
    assert first is True
    assert not j("Bananas are a rich source of potassium.", text)


def test_cached_judge_hashes_prompts_and_persists(tmp_path):
    calls = []

    def fake(prompt):
        calls.append(prompt)
        return "Yes."

    path = tmp_path / "cache.jsonl"
    c = CachedJudge(fake, path)
    assert c("p1") == "Yes." and c("p1") == "Yes." and len(calls) == 1
    c2 = CachedJudge(fake, path)
    assert c2("p1") == "Yes." and len(calls) == 1
    path.write_text(path.read_text() + "{torn", encoding="utf-8")
    assert CachedJudge(fake, path)("p1") == "Yes."


def test_llm_support_judge_parses_and_survives_errors():
    assert parse_yes_no("Yes, it does") and not parse_yes_no("No.") and not parse_yes_no("")
    j = LLMSupportJudge(lambda p: "yes" if "Claim: 330" in p else "no")
    assert j("330 metres", DOC) and not j("other", DOC)

    def broken(prompt):
        raise RuntimeError("service down")

    bad = LLMSupportJudge(broken)
    with pytest.warns(UserWarning):
        assert bad("claim", DOC) is False
    assert bad.errors == 1


def test_offline_rejects_bad_thresholds():
    with pytest.raises(ValueError):
        OfflineSupportJudge(overlap=2.0)
