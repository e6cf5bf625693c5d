"""torch_geometric's scatter and softmax as message-passing layers call them, with and without sizes.

Without an explicit size both read `index.max()` on the host to size their output
(torch_geometric/utils/_scatter.py scatter: `dim_size = int(index.max()) + 1`; torch_geometric/utils/_softmax.py
softmax: `N = maybe_num_nodes(index, num_nodes)`, and torch_geometric/utils/num_nodes.py maybe_num_nodes:
`int(index.max()) + 1`), so capture fails with `capture_sync`. With `dim_size` / `num_nodes` given, both are
`new_zeros(size).scatter_add_` / `scatter_reduce_` and index_select on fixed shapes: `pass`.
"""

from __future__ import annotations

import torch

from graphsafe import Case, register

# Imported by the ops on their first call (in the worker that runs them), not here: every process that loads
# the suites would pay torch_geometric's import (6-7 s on the H200, most of it torch._dynamo and sympy,
# reports/performance.md). `import:torch_geometric` looks it up without importing it; where it is missing the
# cases are skipped with that reason.
REQUIRES = ("import:torch_geometric",)

NODES, EDGES, CHANNELS = 12, 48, 8


def _edges(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "messages": torch.randn(EDGES, CHANNELS, generator=g).to(device),
        "target": torch.randint(0, NODES, (EDGES,), generator=g).to(device),
    }


def scatter_sum_inferred(messages: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    from torch_geometric.utils import scatter

    return scatter(messages, target, dim=0, reduce="sum")


def scatter_sum_sized(messages: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    from torch_geometric.utils import scatter

    return scatter(messages, target, dim=0, dim_size=NODES, reduce="sum")


def scatter_mean_sized(messages: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    from torch_geometric.utils import scatter

    return scatter(messages, target, dim=0, dim_size=NODES, reduce="mean")


def softmax_inferred(messages: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Attention coefficients per target node, as GATConv computes them."""
    from torch_geometric.utils import softmax

    return softmax(messages, target)


def softmax_sized(messages: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    from torch_geometric.utils import softmax

    return softmax(messages, target, num_nodes=NODES)


_SYNC = (
    "expected capture_sync: without a size, torch_geometric reads int(index.max()) + 1 on the host "
    "(utils/_scatter.py scatter / utils/num_nodes.py maybe_num_nodes)"
)
_SAFE = (
    "expected pass: with the size given, torch_geometric builds new_zeros(size) and calls scatter_add_ / "
    "scatter_reduce_ (include_self=False) and index_select: fixed shapes, kernels only"
)
# CUDA scatter_add_ on a 2-D float source accumulates with atomicAdd, so the summation order (and the last bits)
# varies from run to run; torch.use_deterministic_algorithms makes it deterministic for 1-D sources only.
# float32 sums of ~4 messages per node reorder within a few ulp: 1e-5 relative leaves 50x margin.
_ATOMICS = (
    "; replay_tolerance 1e-5: CUDA scatter_add_ on a 2-D float source sums with atomicAdd in varying order"
)
register(
    Case(
        name="pyg_scatter_sum_inferred_size",
        make_inputs=_edges,
        requires=REQUIRES,
        op=scatter_sum_inferred,
        expect="capture_sync",
        note=_SYNC,
    )
)
register(
    Case(
        name="pyg_scatter_sum_dim_size",
        make_inputs=_edges,
        requires=REQUIRES,
        op=scatter_sum_sized,
        replay_tolerance=1e-5,
        note=_SAFE + _ATOMICS,
    )
)
register(
    Case(
        name="pyg_scatter_mean_dim_size",
        make_inputs=_edges,
        requires=REQUIRES,
        op=scatter_mean_sized,
        replay_tolerance=1e-5,
        note=_SAFE + _ATOMICS,
    )
)
register(
    Case(
        name="pyg_softmax_inferred_num_nodes",
        make_inputs=_edges,
        requires=REQUIRES,
        op=softmax_inferred,
        expect="capture_sync",
        note=_SYNC,
    )
)
register(
    Case(
        name="pyg_softmax_num_nodes",
        make_inputs=_edges,
        requires=REQUIRES,
        op=softmax_sized,
        replay_tolerance=1e-5,
        note=_SAFE + _ATOMICS,
    )
)
