"""PyTorch issue #78549: SyncBatchNorm's empty-rank mask syncs with the host and breaks CUDA graph capture.

Public report: https://github.com/pytorch/pytorch/issues/78549 (2022-05-31), "https://github.com/pytorch/
pytorch/pull/74944 breaks CUDA graph capture"; fixed by PR #78666 (2022-06-01, landed for 1.12 as #78810).
The issue: "Prior to https://github.com/pytorch/pytorch/pull/74944, pytorch's native sync batch norm was safe
to use with CUDA graph capture", and after it graph-capturing syncbn fails in
torch/nn/modules/_functions.py at `count_all = count_all[mask]` with "RuntimeError: CUDA error: operation not
permitted when stream is capturing" (raised from memcpy_and_sync in nonzero_cuda_out_impl). PR #74944 added
empty-batch support: after the all-gather of every rank's (mean, invstd, count), the stats of ranks with
count 0 are dropped with a boolean mask, and a boolean-mask index sizes its result from a nonzero count
copied to the host. The fix (#78666) skips the masking while the current stream is capturing; "To support
empty inputs with CUDA graph capturing, we might need to update CUDA kernels for batch_norm_backward_elemt
and batch_norm_gather_stats_with_counts. See #78656" (still open).

Rebuilt here in torch ops (the same on the cpu and gpu backends): SyncBatchNorm.forward for WORLD ranks on
one device. The all-gather is the stack of the ranks' (mean, invstd, count) rows; batch_norm_stats,
batch_norm_gather_stats_with_counts and batch_norm_elemt are written out in torch ops (the ATen ones are
CUDA-only), with the gather's math: each rank's biased variance from its invstd, combined by counts.
- buggy (after #74944): the mask runs on every call: the capture stops at the boolean-mask index,
  `capture_sync` (the cpu backend's recorder names the same op by ATen's rule for boolean indexing);
- fixed (#78666): the mask is skipped while capturing (`graphsafe.is_capturing()` stands in for
  `torch.cuda.is_current_stream_capturing()`, so the cpu backend's recorder counts as a capture); with
  every rank non-empty the unmasked stats are the same rows, and the replay equals eager: `pass`.

Left out: several processes and NCCL (the ranks are slices of one tensor); running statistics and momentum
(running_mean/var None); the backward pass; the fix's known gap, a rank with an empty batch under capture
(its stats then enter the gather with count 0; the harness's inputs keep their shapes, so no rank is
empty); the report gives no shapes (WORLD, batch and channels are small).
"""

from __future__ import annotations

import functools

import torch

from graphsafe import Case, is_capturing, register
from graphsafe.toolkit import CaseTable, Column, Line, Report

WORLD, BATCH, CHANNELS, LENGTH = 4, 8, 16, 32  # ranks, per-rank batch, channels, positions (BatchNorm1d)
EPS = 1e-5  # nn.SyncBatchNorm's default


def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = torch.Generator().manual_seed(78549)
    shift = torch.randn(WORLD, 1, CHANNELS, 1, generator=g)  # ranks see different statistics
    return {
        "x": (torch.randn(WORLD, BATCH, CHANNELS, LENGTH, generator=g) * 2 + shift).to(device),
        "weight": (1 + 0.1 * torch.randn(CHANNELS, generator=w)).to(device),
        "bias": (0.1 * torch.randn(CHANNELS, generator=w)).to(device),
    }


def _rank_stats(x: torch.Tensor) -> torch.Tensor:
    """batch_norm_stats then the cat of SyncBatchNorm.forward for one rank: (mean, invstd, count), 2C + 1."""
    dims = [d for d in range(x.dim()) if d != 1]
    mean = x.mean(dim=dims)
    invstd = torch.rsqrt(x.var(dim=dims, unbiased=False) + EPS)
    count = torch.full((1,), x.numel() // x.size(1), dtype=mean.dtype, device=mean.device)
    return torch.cat([mean, invstd, count], dim=0)


def sync_batch_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, *, skip_mask_under_capture: bool
) -> torch.Tensor:
    # all_gather_into_tensor: world_size * (2C + 1) -> world_size * C, world_size * C, world_size * 1
    combined = torch.stack([_rank_stats(x[rank]) for rank in range(WORLD)], dim=0)
    mean_all, invstd_all, count_all = torch.split(combined, CHANNELS, dim=1)

    if not (skip_mask_under_capture and is_capturing()):
        # remove stats from empty inputs (#74944): a boolean-mask index, sized on the host
        mask = count_all.squeeze(-1) >= 1
        count_all = count_all[mask]
        mean_all = mean_all[mask]
        invstd_all = invstd_all[mask]

    # batch_norm_gather_stats_with_counts: each rank's biased variance from its invstd, combined by counts.
    counts = count_all.view(-1, 1)
    total = counts.sum(dim=0)
    mean = (counts * mean_all).sum(dim=0) / total
    var_all = invstd_all.pow(-2) - EPS
    var = (counts * (var_all + (mean_all - mean).pow(2))).sum(dim=0) / total
    invstd = torch.rsqrt(var + EPS)

    # batch_norm_elemt on every rank's input
    shape = (1, 1, CHANNELS, 1)
    return (x - mean.view(shape)) * (invstd * weight).view(shape) + bias.view(shape)


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """float64 batch norm over every rank's batch at once: what the synchronized statistics amount to."""
    xd = x.double()
    mean = xd.mean(dim=(0, 1, 3), keepdim=True)
    var = xd.var(dim=(0, 1, 3), unbiased=False, keepdim=True)
    shape = (1, 1, CHANNELS, 1)
    out = (xd - mean) / torch.sqrt(var + EPS) * weight.double().view(shape) + bias.double().view(shape)
    return out.to(x.dtype)


VARIANTS = {
    variant: register(
        Case(
            name=f"pytorch78549.sync_batch_norm.{variant}",
            make_inputs=make_inputs,
            op=functools.partial(sync_batch_norm, skip_mask_under_capture=skip),
            reference=reference,
            static_inputs=("weight", "bias"),
            expect=expect,
            note=note,
        )
    )
    for variant, skip, expect, note in (
        (
            "buggy",
            False,
            "capture_sync",
            "count_all[mask] sizes its result from a nonzero count read on the host",
        ),
        ("fixed", True, "pass", "the empty-rank mask is skipped while capturing"),
    )
}

REPORT = Report(
    title="PyTorch #78549: SyncBatchNorm's empty-rank mask syncs with the host and breaks CUDA graph capture",
    url="https://github.com/pytorch/pytorch/issues/78549",
    date="2022-05-31",
    reproduced=f"SyncBatchNorm.forward for {WORLD} ranks on one device (the all-gather as a stack of the ranks' "
    "mean/invstd/count rows), with the empty-rank mask on every call (after #74944) or skipped while "
    "capturing (#78666)",
    left_out="several processes and NCCL; running statistics and momentum; the backward pass; an empty rank "
    "under capture (the fix's open gap, #78656); the ATen batch-norm kernels (CUDA-only, written out in "
    "torch ops); the report gives no shapes",
    tables=(
        CaseTable(
            title="Capturing SyncBatchNorm.forward (the report: capture fails at count_all[mask])",
            label_header="check",
            lines=(Line("SyncBatchNorm forward", buggy=VARIANTS["buggy"], fixed=VARIANTS["fixed"]),),
            columns=(
                Column("verdict", "buggy", header="after #74944"),
                Column("verdict", "fixed", header="#78666"),
                Column("detail", "buggy", header="after #74944 detail"),
                Column("graph error", "fixed", header="#78666 graph error"),
                Column("as expected"),
            ),
            sides=("after #74944", "#78666"),
        ),
    ),
)
