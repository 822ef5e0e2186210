"""llama.cpp's GPU backends: what each names its devices, which arithmetic units its prompt kernels use on a card,
and what ``-fa auto`` means there.

A backend is the library a build runs a card with (``-DGGML_CUDA``, ``GGML_HIP``, ``GGML_VULKAN``, ``GGML_METAL``,
``GGML_SYCL``, ``GGML_OPENCL``). Each has its own kernels, so its own share of a card's memory bandwidth and
arithmetic and its own fixed cost per graph node; the engine's cost parameters are kept per backend
(:mod:`sim.llamacpp.params`), never per card.

The prompt's matrix products run on a card's matrix units when the backend has kernels for them and the card has
them (NVIDIA tensor cores under CUDA; AMD WMMA/MFMA under HIP; cooperative matrices under Vulkan, ``NV_coopmat2``
or ``KHR_coopmat`` as the driver exposes them; Intel XMX under SYCL), else on its vector ALUs. Each such *path* has
its own efficiency, relative to the peak of the units it uses: the card's dense FP16 matrix throughput
(``tflops``) or its FP32 vector throughput (``fp32_tflops``).
"""

from __future__ import annotations

from typing import Literal

Backend = Literal["cuda", "hip", "vulkan", "metal", "sycl", "opencl", "cpu"]
BACKENDS: tuple[str, ...] = ("cuda", "hip", "vulkan", "metal", "sycl", "opencl")  # GPU backends
VulkanMatrix = Literal["auto", "coopmat2", "coopmat", "none"]

_PREFIX = {"cuda": "CUDA", "hip": "ROCm", "vulkan": "Vulkan", "metal": "Metal", "sycl": "SYCL", "opencl": "OpenCL"}


def device_name(backend: str, index: int) -> str:
    """The name llama.cpp gives a backend's ``index``-th device (CUDA0, ROCm0, Vulkan0, SYCL0, OpenCL0); Metal has
    one device, named ``Metal`` in llama.cpp's buffer and log lines."""
    if backend == "metal":
        return "Metal" if index == 0 else f"Metal{index}"
    return f"{_PREFIX[backend]}{index}"


def device_prefixes() -> tuple[str, ...]:
    """Every backend's device-name prefix, upper case (for reading ``-ot`` buffers and logs)."""
    return tuple(p.upper() for p in _PREFIX.values())


VENDOR_BACKENDS = {"nvidia": "cuda", "amd": "hip", "intel": "sycl", "apple": "metal"}  # each vendor's usual backend


def default_backend(vendor: str | None) -> str:
    """The backend a card's vendor is usually run with: CUDA on NVIDIA, HIP (ROCm) on AMD, SYCL on Intel, Metal on
    Apple; Vulkan on anything else."""
    return VENDOR_BACKENDS.get(vendor or "", "vulkan")


def vulkan_matrix(vendor: str | None, matrix_units: str | None, given: str = "auto") -> str:
    """Which cooperative-matrix extension Vulkan's prompt kernels use on a card: what the scenario says, else
    ``coopmat2`` on NVIDIA cards with tensor cores (NV_cooperative_matrix2, recent drivers), ``coopmat`` (KHR) on
    other cards with matrix units, ``none`` (scalar shaders) on cards without."""
    if given != "auto":
        return given
    if not matrix_units or matrix_units == "none":
        return "none"
    return "coopmat2" if vendor == "nvidia" else "coopmat"


def compute_path(backend: str, vendor: str | None, matrix_units: str | None, vulkan: str = "auto") -> str:
    """The prompt kernels' arithmetic path of ``backend`` on a card: ``BACKEND_matrix`` when they run on its matrix
    units (Vulkan: ``vulkan_coopmat2`` or ``vulkan_coopmat``), else ``BACKEND_vector``."""
    has_matrix = bool(matrix_units) and matrix_units != "none"
    if backend == "vulkan":
        kind = vulkan_matrix(vendor, matrix_units, vulkan)
        return "vulkan_vector" if kind == "none" or not has_matrix else f"vulkan_{kind}"
    if backend == "metal":
        return "metal_matrix" if matrix_units == "neural_accelerator" else "metal_vector"
    if backend == "opencl":
        return "opencl_vector"
    return f"{backend}_matrix" if has_matrix else f"{backend}_vector"


PATHS: tuple[str, ...] = ("cuda_matrix", "cuda_vector", "hip_matrix", "hip_vector", "vulkan_coopmat2",
                          "vulkan_coopmat", "vulkan_vector", "metal_matrix", "metal_vector", "sycl_matrix",
                          "sycl_vector", "opencl_vector")


MATRIX_PATHS: tuple[str, ...] = tuple(p for p in PATHS if not p.endswith("_vector"))
VECTOR_PATHS: tuple[str, ...] = tuple(p for p in PATHS if p.endswith("_vector"))


def vector_path(backend: str) -> str:
    """The vector path of ``backend`` (its kernels without matrix units)."""
    return f"{backend}_vector"


def uses_matrix_units(path: str) -> bool:
    """True when ``path``'s peak is the card's matrix throughput (``tflops``), False for its vector throughput."""
    return not path.endswith("_vector")


def flash_attn_auto(backend: str) -> bool:
    """What ``-fa auto`` (llama.cpp's default since it became a tri-state) resolves to: on where the backend has a
    flash-attention kernel for the card, which every GPU backend here has; off on the CPU alone."""
    return backend in BACKENDS
