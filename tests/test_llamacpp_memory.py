"""What llama.cpp allocates, against buffers its logs printed (calibration/checks/llamacpp_logs.csv, mainline rows:
checks of the formulas of docs/research/llamacpp_internals.md, never fitted); backends' device names; a machine
without a GPU and a unified-memory chip as llama.cpp hosts."""

from __future__ import annotations

import csv
import os

import pytest
from conftest import ROOT

from sim.core.errors import SimulationError
from sim.core.units import MIB
from sim.llamacpp.backends import compute_path, device_name
from sim.llamacpp.machine import MachineSpec, build_scenario, scenario_dict
from sim.llamacpp.setup import setup_llamacpp

MODELS = os.path.join(ROOT, "calibration", "models")


def _checks() -> dict[str, dict]:
    with open(os.path.join(ROOT, "calibration", "checks", "llamacpp_logs.csv"), encoding="utf-8") as fh:
        return {r["row_id"]: r for r in csv.DictReader(fh)}


def _printed(cell: str, device: str) -> float:
    """A device's MiB from a ``CUDA0=266.50;CUDA_Host=10.01`` cell."""
    return dict((k, float(v)) for k, v in (part.split("=") for part in cell.split(";")))[device]


def _setup(model: str, quant: str, settings: dict, gpu: str | None = "rtx4090", gpus: int = 1,
           host: str = "ryzen9_7950x", backend: str | None = None):
    spec = MachineSpec(gpu, host, gpus=gpus, host_fields={"ram_gib": 512})
    if backend:
        settings = settings | {"backend": backend}
    raw = scenario_dict(spec, os.path.join(MODELS, model), quant, settings)
    scn = build_scenario(raw, "test")
    return setup_llamacpp(scn, "box")


@pytest.mark.parametrize("row, model, quant, settings, backend, device, tolerance, gpu", [
    # Llama-3.1-8B on one card, flash attention, ubatch 1024: the logits of the ubatch set the card's buffer
    ("LCL039", "llama-3.1-8b.json", "Q4_0", {"ctx_size": 16384, "ubatch_size": 1024, "flash_attn": True},
     "vulkan", "Vulkan0", 0.10, "rtx4090"),
    # Qwen3-235B with blocks 13-93's FFNs on the CPU: the card receives one expert tensor for the prompt's ops
    ("LCL021", "qwen3-235b-a22b.json", "Q8_0", {"ctx_size": 32768, "flash_attn": True,
                                                "override_tensor": [r"blk\.(1[3-9]|[2-8][0-9]|9[0-3])\.ffn=CPU"]},
     "cuda", "CUDA0", 0.10, "rtx_pro_6000"),
    # ... and with no block on the card at all (-ngl 0): still the staged expert tensor
    ("LCL023", "qwen3-235b-a22b.json", "Q6_K", {"ctx_size": 16384, "n_gpu_layers": 0, "flash_attn": True,
                                                "cache_type_k": "q8_0"}, "cuda", "CUDA0", 0.10, "rtx3090"),
])
def test_compute_buffers_are_the_largest_phase_llama_cpp_reserves(row, model, quant, settings, backend, device,
                                                                   tolerance, gpu):
    printed = _printed(_checks()[row]["compute_buffer_mib"], device)
    st = _setup(model, quant, settings, gpu=gpu, backend=backend)
    card = next(m for m in st.memory if m.device == device)
    assert card.compute / MIB == pytest.approx(printed, rel=tolerance)


def test_the_host_buffer_holds_the_embedded_tokens_and_the_mask():
    row = _checks()["LCL039"]
    st = _setup("llama-3.1-8b.json", "Q4_0", {"ctx_size": 16384, "ubatch_size": 1024, "flash_attn": True},
                backend="vulkan")
    assert st.memory[0].compute / MIB == pytest.approx(_printed(row["compute_buffer_mib"], "Vulkan_Host"), rel=0.02)
    assert st.memory[1].kv / MIB == pytest.approx(_printed(row["kv_buffer_mib"], "Vulkan0"), rel=1e-6)


def test_without_flash_attention_one_layers_scores_grow_with_the_context():
    small = _setup("llama-3.1-8b.json", "Q4_0", {"ctx_size": 4096, "flash_attn": False}).memory[1].compute
    large = _setup("llama-3.1-8b.json", "Q4_0", {"ctx_size": 65536, "flash_attn": False}).memory[1].compute
    flash = _setup("llama-3.1-8b.json", "Q4_0", {"ctx_size": 65536, "flash_attn": True}).memory[1].compute
    assert large > 8 * small and flash < large / 4


def test_devices_are_named_as_their_backend_names_them():
    assert [device_name(b, 0) for b in ("cuda", "hip", "vulkan", "metal", "sycl")] == \
        ["CUDA0", "ROCm0", "Vulkan0", "Metal", "SYCL0"]
    st = _setup("llama-3.1-8b.json", "Q4_0", {"ctx_size": 4096}, gpu="rx7900xtx", backend="hip")
    assert [m.device for m in st.memory] == ["CPU", "ROCm0"]
    assert compute_path("vulkan", "amd", "none") == "vulkan_vector"
    assert compute_path("vulkan", "nvidia", "tensor_core") == "vulkan_coopmat2"
    assert compute_path("cuda", "nvidia", "none") == "cuda_vector"


def test_an_override_rule_names_the_backends_cards():
    st = _setup("qwen3-30b-a3b.json", "Q4_K_M", {"ctx_size": 4096, "override_tensor": [r"exps=ROCm0"]},
                gpu="rx7900xtx", backend="hip")
    assert st.placement.bytes_on("ROCm0") > 0
    with pytest.raises(Exception, match="ROCm0"):
        _setup("qwen3-30b-a3b.json", "Q4_K_M", {"ctx_size": 4096, "override_tensor": [r"exps=CUDA0"]},
               gpu="rx7900xtx", backend="hip")


def test_a_machine_without_a_gpu_runs_llama_cpp_on_its_cpu():
    st = _setup("llama-3.2-3b.json", "Q4_K_M", {"ctx_size": 4096}, gpu=None, host="ryzen9_7950x")
    assert [m.device for m in st.memory] == ["CPU"] and st.backend == "cpu"
    e = st.engine
    assert 0 < e.generate_s(16, 0) and 0 < e.prompt_s(512, 0, 512)
    # decode on the CPU is bound by its DRAM: faster memory, a faster step
    fast = _setup("llama-3.2-3b.json", "Q4_K_M", {"ctx_size": 4096}, gpu=None, host="ryzen9_9950x").engine
    assert fast.generate_s(16, 0) < e.generate_s(16, 0)


def test_a_unified_memory_chip_hosts_the_whole_model_on_its_gpu():
    st = _setup("llama-3.1-8b.json", "Q4_0", {"ctx_size": 4096}, gpu="m2_max_30c", host="ryzen9_7950x",
                backend="metal")
    assert [m.device for m in st.memory] == ["CPU", "Metal"]
    on_gpu = sum(t.bytes for t in st.placement.model.tensors if t.role != "embedding")  # the lookup stays on the CPU
    assert st.placement.bytes_on("Metal") == pytest.approx(on_gpu)
    assert st.engine.generate_s(16, 0) > 0


def test_a_card_too_small_fails_as_llama_cpp_does_in_its_backends_words():
    with pytest.raises(SimulationError, match="hipMalloc failed"):
        _setup("qwen3-30b-a3b.json", "Q8_0", {"ctx_size": 4096}, gpu="rx7800xt", backend="hip")
