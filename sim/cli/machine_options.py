"""The machine and model options of ``sim advise`` and ``sim llama`` (``--model``, ``--gpu``, ``--host``, ...), read
into one :class:`MachineArgs`, and the scenario they describe when no scenario file is given."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import click

from sim.core.errors import ScenarioError


@dataclass(frozen=True)
class MachineArgs:
    """What the machine options say: the model file and its size, the cards, the host and its memory."""

    model_file: str | None = None
    quant: str | None = None
    model_gib: float | None = None
    gpu: str | None = None
    gpus: int = 1
    host: str | None = None
    ram_gib: float | None = None
    os_name: str | None = None
    slot_gen: int | None = None
    slot_lanes: int = 16
    reserved_gib: float = 0.0
    gpu_gib: float | None = None
    vram_gib: float | None = None
    gpu_gbps: float | None = None
    gpu_tflops: float | None = None
    gpu_tensor_tflops: float | None = None
    backend: str | None = None
    dram: str | None = None
    channels: int | None = None
    cores: int | None = None
    threads: int | None = None
    sets: tuple[str, ...] = ()

    def with_quant(self, quant: str | None) -> MachineArgs:
        from dataclasses import replace

        return replace(self, quant=quant)

    def has_host_figures(self) -> bool:
        return self.dram is not None or self.channels is not None or self.cores is not None

    def has_gpu_figures(self) -> bool:
        return any(v is not None for v in (self.vram_gib, self.gpu_gbps, self.gpu_tflops, self.gpu_tensor_tflops))

    def spec(self):
        """The machine as a :class:`sim.llamacpp.machine.MachineSpec`: a catalog card (or one described by its
        figures, :data:`CUSTOM_GPU`), none for the CPU alone; a catalog host with the figures given over it."""
        from dataclasses import replace

        from sim.cli.advise_options import machine_spec

        self.check_figures()
        gpu = CUSTOM_GPU if self.has_gpu_figures() else self.gpu
        if gpu is not None and gpu != CUSTOM_GPU:
            known_gpu(gpu)
        if self.host is not None:
            known_host(self.host)
        spec = machine_spec(gpu if gpu != CUSTOM_GPU else None, self.gpus, self.host or "", self.ram_gib,
                            self.os_name, self.slot_gen, self.slot_lanes, self.reserved_gib, self.gpu_gib)
        return replace(spec, gpu=gpu, host=self.host, gpus=spec.gpus if gpu is not None else 0,
                       host_fields=dict(spec.host_fields) | self.host_figures())

    def check_figures(self) -> None:
        """A one-line error naming the flag for a figure out of its range (before the scenario would name a key)."""
        import math

        for flag, value, high in (("--vram-gib", self.vram_gib, 1 << 20), ("--gpu-gbps", self.gpu_gbps, 1e6),
                                  ("--gpu-tflops", self.gpu_tflops, 1e6), ("--gpu-tensor-tflops",
                                                                           self.gpu_tensor_tflops, 1e6),
                                  ("--ram-gib", self.ram_gib, 1 << 20), ("--model-gib", self.model_gib, 1 << 20)):
            if value is not None and not (math.isfinite(value) and 0 < value <= high):
                raise ScenarioError("command line", flag, f"expected a number above 0 and at most {high:,.0f}, "
                                    f"got {value:g}")
        for flag, value, high in (("--channels", self.channels, 24), ("--cores", self.cores, 1024),
                                  ("--threads", self.threads, 2048)):
            if value is not None and not 1 <= value <= high:
                raise ScenarioError("command line", flag, f"expected 1 to {high}, got {value}")
        if self.slot_lanes not in (1, 2, 4, 8, 16):
            raise ScenarioError("command line", "--slot-lanes", f"expected 1, 2, 4, 8 or 16 lanes, got "
                                f"{self.slot_lanes}")
        if self.host is None and self.has_host_figures() and (self.dram is None or self.channels is None):
            missing = "--dram" if self.dram is None else "--channels"
            raise ScenarioError("command line", missing, "missing: a host given by its figures needs its DRAM "
                                "(--dram DDR5-6000) and channels (--channels 2), or give --host")

    def host_figures(self) -> dict:
        """The host fields the figures give (``--dram DDR5-6000``: kind and MT/s)."""
        out: dict = {}
        if self.dram is not None:
            kind, _, rate = self.dram.upper().partition("-")
            if not kind.isalnum() or not rate.isdigit() or not 100 <= int(rate) <= 20000:
                raise ScenarioError("command line", "--dram", f"expected a kind and a rate from 100 to 20000 MT/s, "
                                    f"such as DDR5-6000 or DDR4-3200, got {self.dram!r}")
            out.update(dram=kind, mt_s=int(rate))
        for key in ("channels", "cores", "threads"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    def gpu_type(self) -> dict | None:
        """The scenario's GPU type for a card described by its figures: the catalog card's entry (--gpu) with the
        figures over it, or the figures alone (--vram-gib and --gpu-gbps needed)."""
        if not self.has_gpu_figures():
            return None
        from sim.catalog import gpu_entries
        from sim.config.machines import GpuType
        from sim.llamacpp.backends import VENDOR_BACKENDS

        base = {k: v for k, v in gpu_entries().get(self.gpu or "", {}).items() if k in GpuType.model_fields}
        vendor = next((v for v, b in VENDOR_BACKENDS.items() if b == self.backend), "")
        figures = {"vram_gib": self.vram_gib, "hbm_gbps": self.gpu_gbps, "fp32_tflops": self.gpu_tflops,
                   "tflops": self.gpu_tensor_tflops}
        card = base | {k: v for k, v in figures.items() if v is not None}
        if not self.gpu:
            card.setdefault("vendor", vendor)
            card.setdefault("pcie_max_gen", self.slot_gen or 4)
            card["name"] = "described by its figures"
            if vendor == "nvidia" and card.get("tflops"):
                card.setdefault("matrix_units", "tensor_core")
        for flag, key in (("--vram-gib", "vram_gib"), ("--gpu-gbps", "hbm_gbps"), ("--gpu-tflops", "fp32_tflops")):
            if key not in card:
                raise ScenarioError("command line", flag, "missing: a card described by its figures needs its VRAM "
                                    "(GiB), memory bandwidth (GB/s) and FP32 TFLOP/s")
        return card

    def finish(self, raw: dict) -> dict:
        """``raw`` (a scenario dict of machine ``box``) with the described card, the backend and every --set."""
        from sim.config.paths import parse_set, set_dotted

        card = self.gpu_type()
        if card is not None:
            raw.setdefault("gpus", {})[CUSTOM_GPU] = card
        if self.backend is not None:
            raw["machines"]["box"]["engine"]["llamacpp"]["backend"] = self.backend
        for expr in self.sets:
            path, value = parse_set(expr)
            set_dotted(raw, path, value, "--set")
        return raw


CUSTOM_GPU = "described"  # the scenario's GPU type of a card given by its figures (--vram-gib, --gpu-gbps, ...)


def _flags_for(kind: str, name: str = "") -> str:
    """The figures that describe a part of ``kind`` (an example; the backend guessed from the name)."""
    if kind != "gpus":
        return "--dram DDR5-6000 --channels 2 --cores 8 --threads 16"
    plain = name.lower()
    backend = "cuda" if plain.startswith(("rtx", "gtx", "titan", "tesla", "quadro", "a1", "a4", "a5", "a6", "h1",
                                          "l4")) else "hip" if plain.startswith(("rx", "radeon", "mi", "w7")) \
        else "sycl" if plain.startswith("arc") else "vulkan"
    return f"--vram-gib 12 --gpu-gbps 384 --gpu-tflops 13.2 --backend {backend}"


def known_gpu(name: str) -> None:
    """A one-line error for a GPU the catalog does not have: the closest name, and the flags that describe one."""
    _known("gpus", name, "--gpu")


def known_host(name: str) -> None:
    _known("hosts", name, "--host")


def _known(kind: str, name: str, flag: str) -> None:
    from sim.catalog import closest, gpu_entries, host_entries

    if name in (gpu_entries() if kind == "gpus" else host_entries()):
        return
    hint = closest(kind, name)
    raise ScenarioError("command line", flag, f"{name!r} is not in the catalog (sim catalog"
                        f"{' --kind hosts' if kind == 'hosts' else ''} lists it)"
                        + (f"; did you mean {hint!r}?" if hint else "") + f" Or describe it: {_flags_for(kind, name)}")


QUANT_HELP = "Quantization of a config.json model (Q4_K_M, MXFP4_MOE, ...)."
SEVERAL_QUANTS_HELP = QUANT_HELP[:-1] + "; several, comma-separated, are ranked together."

_OPTIONS = [
    click.option("--model", "--gguf", "model_file", default=None, help="A config.json (with --quant) or a .gguf "
                 "file (its header is read, not its tensors); default: the scenario's model."),
    None,  # --quant: its help depends on the command (machine_options)
    click.option("--model-gib", type=float, default=None, help="The GGUF file's size (GiB): tensors scaled to it."),
    click.option("--gpu", default=None, help="Catalog GPU type (sim catalog), e.g. rtx4060ti_16gb."),
    click.option("--gpus", type=int, default=1, show_default=True, help="How many of that card, at most 16 "
                 "(llama.cpp's GGML_CUDA_MAX_DEVICES); 0: llama.cpp on the CPU alone."),
    click.option("--host", default=None, help="Catalog host (sim catalog --kind hosts), e.g. ryzen7_9700x."),
    click.option("--ram-gib", type=float, default=None, help="Host RAM installed (GiB): placements needing more "
                 "are left out."),
    click.option("--os", "os_name", type=click.Choice(["linux", "windows", "macos"]), default=None,
                 help="windows: WDDM keeps VRAM for the desktop and falls back to shared memory; default macos for an "
                 "Apple chip, linux otherwise."),
    click.option("--slot-gen", type=int, default=None, help="PCIe generation of the slot (default: the card's)."),
    click.option("--slot-lanes", type=int, default=16, show_default=True, help="PCIe lanes of the slot."),
    click.option("--reserved-gib", type=float, default=0.0, help="VRAM other processes hold on each card (GiB)."),
    click.option("--vram-gib", type=float, default=None, help="A card by its figures: VRAM (GiB); over --gpu's "
                 "entry when both are given."),
    click.option("--gpu-gbps", type=float, default=None, help="A card by its figures: memory bandwidth (GB/s)."),
    click.option("--gpu-tflops", type=float, default=None, help="A card by its figures: FP32 (shader) TFLOP/s."),
    click.option("--gpu-tensor-tflops", type=float, default=None, help="A card by its figures: dense FP16 matrix "
                 "TFLOP/s (tensor cores, WMMA); without it prompts are costed on the FP32 units."),
    click.option("--backend", type=click.Choice(["cuda", "hip", "vulkan", "metal", "sycl", "opencl", "cpu"]),
                 default=None, help="The llama.cpp backend (default: CUDA on NVIDIA, HIP on AMD, SYCL on Intel, Metal "
                 "on Apple)."),
    click.option("--dram", default=None, help="The host by its figures: DRAM kind and rate, DDR5-6000; over --host's "
                 "entry when both are given."),
    click.option("--channels", type=int, default=None, help="The host by its figures: 64-bit DRAM channels."),
    click.option("--cores", type=int, default=None, help="The host by its figures: CPU cores."),
    click.option("--threads", type=int, default=None, help="The host by its figures: hardware threads."),
    click.option("--set", "sets", multiple=True, help="Any scenario change, dotted.path=value (repeatable), e.g. "
                 "machines.box.host.boost_ghz=5.4."),
    click.option("--gpu-gib", type=float, default=None, help="A unified-memory chip (GB10, Strix Halo, Apple): "
                 "what its GPU may allocate of the pool (GiB), as iogpu.wired_limit_mb or the GTT size sets it; "
                 "default: the platform's rule (sim advise then searches up to all the OS leaves and says what to "
                 "set)."),
]
_FIELDS = tuple(MachineArgs.__dataclass_fields__)


def machine_options(quant_help: str = QUANT_HELP):
    """The machine and model options, with ``quant_help`` as --quant's help; the command receives them as one
    ``machine`` argument (a :class:`MachineArgs`)."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(**kwargs):
            machine = MachineArgs(**{k: kwargs.pop(k) for k in _FIELDS})
            return fn(machine=machine, **kwargs)

        for option in reversed(_OPTIONS):
            wrapper = (option or click.option("--quant", default=None, help=quant_help))(wrapper)
        return wrapper
    return decorate


def machine_scenario(scenario: str | None, machine: MachineArgs, settings: dict | None = None,
                     bench: dict | None = None):
    """(scenario, machine name): the scenario file's llama.cpp machine, or one built from the options."""
    from sim.llamacpp.machine import build_scenario, scenario_dict

    if scenario is not None:
        from sim.config.load import load_scenario

        scn, _ = load_scenario(scenario, list(machine.sets))  # --set changes the scenario file's values too
        names = [n for n, m in scn.machines.items() if m.engine is not None and m.engine.llamacpp is not None]
        if not names:
            raise ScenarioError(scenario, "machines", "no machine with an engine.llamacpp section")
        return scn, names[0]
    if machine.model_file is None:
        raise ScenarioError("command line", "--model", "missing: give a scenario, or --model and the machine (--gpu "
                            "and --host, or their figures; no GPU: the CPU alone)")
    if machine.host is None and not machine.has_host_figures():
        raise ScenarioError("command line", "--host", "missing: the machine's catalog host, or its figures "
                            "(--dram DDR5-6000 --channels 2 --cores 8)")
    raw = machine.finish(scenario_dict(machine.spec(), machine.model_file, machine.quant, settings or {},
                                       machine.model_gib, bench=bench))
    return build_scenario(raw, "command line"), "box"
