"""The KV cache keyword must be the one this transformers' decoder takes: under any other name the
forward drops the cache without an error and recomputes without the prefix."""

import inspect

from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaModel

from research_agent.inference.kv_cache import cache_kwargs, cache_name, returned_cache


def test_the_cache_keyword_is_a_parameter_of_the_decoder_forward():
    assert cache_name() in inspect.signature(LlamaModel.forward).parameters


def test_a_cache_fed_under_that_name_is_used_and_returned_grown():
    import torch

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    model = LlamaForCausalLM(config).eval()
    ids = torch.tensor([[5, 9, 13, 2, 7, 11]])
    with torch.no_grad():
        whole = model(input_ids=ids).logits[:, -1]
        first = model(input_ids=ids[:, :4], **cache_kwargs(DynamicCache(config=config)), use_cache=True)
        cache = returned_cache(first)
        assert cache.get_seq_length() == 4
        rest = model(input_ids=ids[:, 4:], position_ids=torch.tensor([[4, 5]]), **cache_kwargs(cache),
                     use_cache=True)
    assert returned_cache(rest).get_seq_length() == 6
    torch.testing.assert_close(rest.logits[:, -1], whole, rtol=1e-4, atol=1e-5)
