"""Megatron-LM PR #5697: a captured FlashInfer sampler replays the same random numbers on every replay.

Public report: https://github.com/NVIDIA/Megatron-LM/pull/5697 (2026-07-07), "Register private sampling RNG
generators with CUDA graphs" (closed unmerged). Its description: "The FlashInfer sampling backend draws from
a private torch.Generator inside a CUDA-graph-captured region. That generator is not part of the
model-parallel RNG tracker, so on graph replay its philox offset was frozen at capture time and every replay
drew identical random numbers." The change merged instead, PR #5791 (2026-07-13, merged 2026-07-24,
"Prevent FlashInfer sampling from running with CUDA graphs"), runs the sampler eagerly and says why in
FlashInferSampling's docstring: "FlashInfer bakes the philox state into a graph as a by-value constant at
capture, so a captured sampler replays identical random numbers". FlashInfer's sampling functions call
`get_seed_and_offset(increment, generator)` (flashinfer/sampling.py): it reads the generator's (seed,
offset) on the host, advances the offset by `(increment + 3) // 4 * 4` and passes both ints to the kernel,
so a graph keeps the pair it saw at capture.

Rebuilt here in torch ops (the same on the cpu and gpu backends): Megatron's sampler before #5791 (logits
scaled by the per-request temperature, softmax) followed by FlashInfer's inverse-transform sampling (one
uniform per row, the first token whose cumulative probability passes it), for the Megatron controller's
sampling seed 42 and a batch of 8 (the batch of #5791's controller test); increment batch_size * 32, as
top_k_top_p_sampling_from_probs asks.
- buggy (the captured sampler): `get_seed_and_offset` on the host, then a counter-based hash of (seed,
  offset, row) standing in for curand's Philox, the two ints entering the kernel by value: every replay
  draws the capture's uniforms: `stale_replay` against eager (which draws from the generator's current
  offset), and one distinct sample over 8 replays of one input;
- fixed (the registration #5697 proposed): the uniforms come from a torch random op on a generator whose
  philox seed and offset a graph reads at replay and advances: the sampler's own generator on the cpu
  backend (the recorded op redraws from it), the device's default generator on a GPU (every capture
  registers it; a private CUDA generator only where torch registers it lazily, pytorch#176753): `pass`,
  a new sample on every replay.
The sampler's host-side (seed, offset) pair lives in a CPU torch.Generator (the offset as its seed: a CPU
generator has no philox offset), so the harness rewinds it before every eager call and replay with the
op's other generators, as it would rewind a CUDA generator's state.

Left out: FlashInfer's kernels (top-k/top-p rejection rounds, deterministic mode) and curand's Philox (a
hash stands in); Megatron's CudaGraphManager, the dynamic inference context and speculative decoding; the
eager sampling of the merged fix (#5791), which keeps the sampler out of the graph altogether.
"""

from __future__ import annotations

import torch

from graphsafe import Case, register
from graphsafe.toolkit import CaseTable, Column, Line, MeasuredTable, Measurement, Report, get_backend

BATCH, VOCAB = 8, 256
SAMPLING_SEED = 42  # TransformerConfig.inference_sampling_seed's default, the sampler generator's seed
INCREMENT = BATCH * 32  # top_k_top_p_sampling_from_probs: get_seed_and_offset(batch_size * 32, generator)
MEASURED_REPLAYS = 8
_M32 = 0xFFFFFFFF
_HASH_MULTIPLIER = 0x45D9F3B  # < 2**27: a 32-bit lane times it stays inside int64


def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "logits": (2 * torch.randn(BATCH, VOCAB, generator=g)).to(device),
        "temperature": (0.5 + torch.rand(BATCH, generator=g)).to(device),
    }


def hashed_uniforms(seed: int, offset: int, rows: int, device: torch.device) -> torch.Tensor:
    """One uniform in (0, 1) per row from (seed, offset, row), seed and offset given by value (host ints)."""
    x = torch.arange(rows, device=device, dtype=torch.int64) + (offset & _M32)
    x = torch.bitwise_xor(x, seed & _M32)
    for mix in (seed >> 32 & _M32, offset >> 32 & _M32):
        x = torch.bitwise_and(torch.bitwise_xor(x, x >> 16) * _HASH_MULTIPLIER, _M32)
        x = torch.bitwise_xor(x, mix)
    x = torch.bitwise_xor(x, x >> 16)
    return ((x.double() + 0.5) / 2.0**32).float()


def inverse_transform(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """The first token whose cumulative probability passes the row's uniform (sampling_from_probs)."""
    cdf = probs.cumsum(dim=-1)
    tokens = torch.searchsorted(cdf, (uniforms * cdf[:, -1]).unsqueeze(1))
    return tokens.squeeze(1).clamp(max=probs.shape[1] - 1)


class FlashInferStyleSampler:
    """The sampler's kernel with its private generator: host-read (seed, offset) or a graph-read state."""

    def __init__(self, *, graph_safe: bool) -> None:
        self.graph_safe = graph_safe
        # Host-side philox state read by get_seed_and_offset: the offset is this generator's seed.
        self.host_state = torch.Generator().manual_seed(0)
        # The generator a graph reads at replay: the sampler's own on the cpu backend (made here, before any
        # check, so the harness follows it: a generator made in the op's first call is not); on a GPU the
        # device's default generator, which every capture registers (a private CUDA generator is registered
        # lazily only in torch releases with pytorch#176753; older ones refuse it under capture).
        self.generators = {"cpu": torch.Generator().manual_seed(SAMPLING_SEED)}

    def get_seed_and_offset(self, increment: int) -> tuple[int, int]:
        """flashinfer.sampling.get_seed_and_offset: read, advance and return the pair, on the host."""
        offset = self.host_state.initial_seed() + (increment + 3) // 4 * 4
        self.host_state.manual_seed(offset)
        return SAMPLING_SEED, offset

    def __call__(self, logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits / temperature.clamp(min=1e-6).unsqueeze(1), dim=-1)
        if self.graph_safe:
            generator = self.generators.get(probs.device.type)  # None: the device's default generator
            uniforms = torch.rand(probs.shape[0], generator=generator, device=probs.device)
        else:
            seed, offset = self.get_seed_and_offset(INCREMENT)
            uniforms = hashed_uniforms(seed, offset, probs.shape[0], probs.device)
        return inverse_transform(probs, uniforms)


BUGGY_SAMPLER = FlashInferStyleSampler(graph_safe=False)
FIXED_SAMPLER = FlashInferStyleSampler(graph_safe=True)

VARIANTS = {
    variant: register(
        Case(
            name=f"megatron5697.sampler.{variant}",
            make_inputs=make_inputs,
            op=sampler,
            expect=expect,
            note=note,
        )
    )
    for variant, sampler, expect, note in (
        (
            "buggy",
            BUGGY_SAMPLER,
            "stale_replay",
            "seed and offset read on the host at capture and passed by value: every replay draws the same",
        ),
        (
            "fixed",
            FIXED_SAMPLER,
            "pass",
            "uniforms from a random op on the sampler's generator, whose state the graph reads at replay",
        ),
    )
}


def distinct_samples(backend: str, sampler: FlashInferStyleSampler) -> int:
    """Capture the sampler once and replay it MEASURED_REPLAYS times on one input: distinct token vectors."""
    be = get_backend(backend)
    with be.poisoned_allocation(0xFF), torch.no_grad():
        static = make_inputs(0, be.device)
        graph = be.capture(lambda: sampler(**static))
        try:
            samples = set()
            for _ in range(MEASURED_REPLAYS):
                graph.replay()
                be.synchronize()
                samples.add(tuple(graph.outputs[0].tolist()))
        finally:
            graph.release()
    return len(samples)


def _measure(backend: str) -> list[Measurement]:
    rows = []
    for label, sampler, want_all_distinct in (
        ("by-value seed and offset (captured FlashInfer sampler)", BUGGY_SAMPLER, False),
        ("graph-read generator state (#5697's registration)", FIXED_SAMPLER, True),
    ):
        distinct = distinct_samples(backend, sampler)
        ok = distinct == MEASURED_REPLAYS if want_all_distinct else distinct == 1
        rows.append(Measurement(values=(label, str(MEASURED_REPLAYS), str(distinct)), ok=ok))
    return rows


REPORT = Report(
    title="Megatron-LM #5697: a captured FlashInfer sampler draws identical random numbers on every replay",
    url="https://github.com/NVIDIA/Megatron-LM/pull/5697",
    date="2026-07-07",
    reproduced=f"temperature sampling for a batch of {BATCH} with seed {SAMPLING_SEED}: the philox seed and "
    "offset read on the host and passed by value (FlashInfer's get_seed_and_offset, captured) against a "
    "random op on the sampler's own generator, whose state the graph reads at replay (the registration "
    "#5697 proposed)",
    left_out="FlashInfer's kernels and curand's Philox (a hash of seed, offset and row stands in); top-k/top-p "
    "filtering; Megatron's CudaGraphManager and inference context; on a GPU the fixed variant's generator is the "
    "device's default one, not a private one; the merged fix (#5791) runs the sampler eagerly, outside any graph",
    tables=(
        CaseTable(
            title="Replay vs eager on new inputs, both from the same generator state",
            label_header="check",
            lines=(Line("sampler", buggy=VARIANTS["buggy"], fixed=VARIANTS["fixed"]),),
            columns=(
                Column("verdict", "buggy", header="by-value state"),
                Column("verdict", "fixed", header="graph-read state"),
                Column("detail", "buggy", header="by-value state detail"),
                Column("as expected"),
            ),
            sides=("by-value state", "graph-read state"),
        ),
        MeasuredTable(
            title=f"One input, {MEASURED_REPLAYS} replays of one captured sampler: distinct samples",
            headers=("sampler", "replays", "distinct samples"),
            measure=_measure,
            claim=f"the by-value state replays one sample {MEASURED_REPLAYS} times (the report: every replay "
            "drew identical random numbers); the graph-read state draws a new one on every replay",
        ),
    ),
)
