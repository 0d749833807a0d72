"""LoRA adapters from PEFT on the quantized layers (quantkit.integrations.peft), every recipe, on the CPU reference."""
import pytest
import torch

import quantkit
from quantkit.layers import QuantizedLinear

peft = pytest.importorskip("peft")
from quantkit.integrations.peft import QuantizedLoraLinear, from_pretrained, get_peft_model  # noqa: E402

TARGETS = ["q_proj", "v_proj", "down_proj"]


def tiny_llama(recipe):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=100)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    quantkit.quantize_(model, recipe)
    return model


@pytest.mark.parametrize("recipe", ["fp8-block", "int8-dynamic", "int8-weight-only", "int4-weight-only"])
def test_lora_trains_saves_and_loads_on_quantized_layers(tmp_path, recipe):
    ids = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(1))
    model = tiny_llama(recipe)
    with torch.no_grad():
        base = model(input_ids=ids).logits
    with pytest.raises(ValueError, match="is not supported"):  # why the integration exists
        peft.get_peft_model(tiny_llama(recipe), peft.LoraConfig(r=4, target_modules=TARGETS))

    tuned = get_peft_model(model, peft.LoraConfig(r=4, target_modules=TARGETS))
    wrapped = [m for m in tuned.modules() if isinstance(m, QuantizedLoraLinear)]
    assert len(wrapped) == 2 * len(TARGETS)
    assert all(isinstance(m.get_base_layer(), QuantizedLinear) for m in wrapped)
    assert not any("qweight" in m.__dict__ for m in tuned.modules() if isinstance(m, QuantizedLinear))
    lora = {name: p for name, p in tuned.named_parameters() if p.requires_grad}
    assert lora and all("lora_" in name for name in lora)  # the quantized base is frozen: buffers only
    assert {p.dtype for p in lora.values()} == {torch.float32}  # not the codes' dtype (float8_e4m3fn for fp8)
    with torch.no_grad():
        assert torch.equal(tuned(input_ids=ids).logits, base)  # lora_B starts at zero

    optimizer = torch.optim.SGD(list(lora.values()), lr=0.5)
    losses = []
    for _ in range(3):
        loss = tuned(input_ids=ids, labels=ids).loss
        loss.backward()
        # the lowest layer's adapter gets its gradient through every quantized layer above it (input gradients)
        assert lora["base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight"].grad.abs().sum() > 0
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[2] < losses[0]
    with torch.no_grad():
        trained = tuned(input_ids=ids).logits
    assert not torch.equal(trained, base)

    tuned.save_pretrained(tmp_path / "adapter")
    loaded = from_pretrained(tiny_llama(recipe), tmp_path / "adapter")
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, trained)
    with pytest.raises(NotImplementedError, match=r"cannot merge a LoRA adapter into \w+Linear"):
        tuned.merge_and_unload()
