"""`rota estimate`: parameters from a config.json, what a script's code shows, and advice."""

from __future__ import annotations

import textwrap

import pytest

from rota.errors import InvalidSpec
from rota.ml import advise
from rota.ml.estimate import LlmTable, params_from_config
from rota.ml.scan import scan

GIB = 1 << 30
TABLE = LlmTable()

# Configs as published on the Hugging Face hub (only the keys that count), and the
# parameter counts their model cards give.
LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
             "vocab_size": 32000, "intermediate_size": 11008, "num_attention_heads": 32,
             "num_key_value_heads": 32, "hidden_act": "silu", "tie_word_embeddings": False}
QWEN25_7B = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
             "vocab_size": 152064, "intermediate_size": 18944, "num_attention_heads": 28,
             "num_key_value_heads": 4, "hidden_act": "silu", "tie_word_embeddings": False}
QWEN25_05B = {"model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24,
              "vocab_size": 151936, "intermediate_size": 4864, "num_attention_heads": 14,
              "num_key_value_heads": 2, "hidden_act": "silu", "tie_word_embeddings": True}
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "vocab_size": 50257,
        "n_head": 12, "activation_function": "gelu_new"}
MIXTRAL = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
           "vocab_size": 32000, "intermediate_size": 14336, "num_attention_heads": 32,
           "num_key_value_heads": 8, "hidden_act": "silu", "num_local_experts": 8,
           "tie_word_embeddings": False}


@pytest.mark.parametrize(("config", "published"), [
    (LLAMA2_7B, 6.74e9), (QWEN25_7B, 7.61e9), (QWEN25_05B, 0.494e9), (GPT2, 0.124e9),
    (MIXTRAL, 46.7e9),
])
def test_parameters_from_a_config_match_published_counts(config: dict[str, object],
                                                         published: float) -> None:
    assert params_from_config(config) == pytest.approx(published, rel=0.01)


def test_a_config_without_the_sizes_is_refused_naming_them() -> None:
    with pytest.raises(InvalidSpec, match="hidden_size, vocab_size"):
        params_from_config({"num_hidden_layers": 2})
    assert params_from_config({"text_config": QWEN25_7B}) == params_from_config(QWEN25_7B)


QLORA = textwrap.dedent("""
    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments, BitsAndBytesConfig
    from peft import LoraConfig, get_peft_model
    model = AutoModelForCausalLM.from_pretrained(
        "meta-llama/Llama-2-13b-hf", device_map="auto",
        quantization_config=BitsAndBytesConfig(load_in_4bit=True))
    model = get_peft_model(model, LoraConfig(r=16))
    args = TrainingArguments(output_dir="out", per_device_train_batch_size=4)
    Trainer(model=model, args=args).train()
""")
PLAIN_TORCH = textwrap.dedent("""
    import torch
    net = torch.nn.Linear(10, 10).cuda()
    opt = torch.optim.AdamW(net.parameters())
    for x in loader(batch_size=64):
        loss = net(x.to("cuda:0")).sum()
        loss.backward()
        opt.step()
""")
CPU_ONLY = textwrap.dedent("""
    import pandas as pd
    df = pd.read_csv("data.csv")
    print(df.describe())
""")


def test_scan_reads_what_bears_on_gpu_needs() -> None:
    f = scan(QLORA)
    assert set(f.frameworks) == {"torch", "transformers", "peft"}
    assert f.models == [(5, "meta-llama/Llama-2-13b-hf")]
    assert f.mode == "qlora" and f.uses_gpu and f.multi_gpu
    assert f.batch_sizes == [(9, "per_device_train_batch_size", 4)]
    g = scan(PLAIN_TORCH)
    assert g.mode == "full" and [w for _, w in g.gpu_uses] == [".cuda()", "'cuda:0'"]
    assert g.batch_sizes == [(5, "batch_size", 64)] and not g.models
    c = scan(CPU_ONLY)
    assert not c.uses_gpu and c.mode == "inference" and not c.frameworks
    with pytest.raises(InvalidSpec, match="line 2"):
        scan("x = 1\ndef broken(:\n", name="bad.py")


def test_advice_for_scripts() -> None:
    a = advise.for_script(scan(QLORA), name="ft.py", table=TABLE, gpu_memory=24 * GIB,
                          mode=None, dtype="bf16", past_runs=[1200.0, 1500.0])
    # 13B x 0.5 B x 1.3 + 1 GiB = 9.5 GB: a share of a 24 GiB GPU
    assert a.gpus == 0.5 and a.gpu_mem is not None and 9e9 < a.gpu_mem < 10e9
    assert a.time_limit == 2400.0  # 1500 s x 1.5 = 2250 s, up to 5 minutes
    text = "\n".join(a.reasons)
    assert "4-bit" in text and "Llama-2-13b" in text and "line 5" in text
    assert "2 past runs of ft.py took up to 25m00s" in text
    assert a.submit_options() == ["--gpus", "0.5", "--gpu-mem", "9G", "--time-limit", "40m"]
    b = advise.for_script(scan(PLAIN_TORCH), name="t.py", table=TABLE, gpu_memory=80 * GIB,
                          mode=None, dtype="bf16")
    assert b.gpus == 1.0 and b.gpu_mem is None and b.time_limit is None
    assert any("no model size found" in r for r in b.reasons)
    c = advise.for_script(scan(CPU_ONLY), name="c.py", table=TABLE, gpu_memory=80 * GIB,
                          mode=None, dtype="bf16")
    assert c.gpus == 0.0 and any("CPU only" in r for r in c.reasons)
    listed = LlmTable.from_dict({"models": {"llama-2-13b-hf": 2}})
    d = advise.for_script(scan(QLORA), name="ft.py", table=listed, gpu_memory=80 * GIB,
                          mode=None, dtype="bf16")
    assert d.gpus == 2.0  # the table wins over the formula


def test_advice_for_a_config_and_a_model_name() -> None:
    a = advise.for_config(QWEN25_7B, label="qwen/config.json", gpu_memory=80 * GIB,
                          mode="full", dtype="bf16")
    # 7.6B x 16 B x 1.2 = 146 GB: two whole 80 GiB GPUs at 90 %
    assert a.gpus == 2.0 and "7.62B parameters" in a.reasons[0]
    b = advise.for_model("qwen2.5-7b", table=TABLE, gpu_memory=24 * GIB, mode="inference",
                         dtype="bf16")
    assert b.gpus == 0.75 and b.gpu_mem is not None


def test_time_limit_from_past_runs() -> None:
    assert advise.time_limit_from([], "x.py")[0] is None
    assert advise.time_limit_from([10.0], "x.py")[0] == 300.0
    assert advise.time_limit_from([3600.0, 60.0], "x.py") == (
        5400.0, "2 past runs of x.py took up to 1h00m: time limit 1h30m (x1.5, rounded up)")
