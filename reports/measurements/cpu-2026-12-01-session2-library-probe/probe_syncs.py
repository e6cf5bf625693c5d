import torch

from harness import Case, check


def inputs(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(64, generator=g).to(device)}


ops = {
    "equal": lambda x: x * (1.0 if torch.equal(x, x) else 2.0),
    "allclose": lambda x: x * (1.0 if torch.allclose(x, x) else 2.0),
    "bool_any": lambda x: x * 2 if (x > 0).any() else x,
    "int_sum": lambda x: x * int((x > 0).sum()),
    "float_max": lambda x: x / float(x.abs().max()),
    "bool_index": lambda x: x[x > 0].sum().expand(1),
    "argwhere": lambda x: torch.argwhere(x > 0).float().sum().expand(1),
    "unique": lambda x: torch.unique((x > 0).long()).float(),
    "count_nonzero": lambda x: torch.count_nonzero(x > 0).float().expand(1),
    "topk": lambda x: torch.topk(x, 5).values,
    "sort": lambda x: torch.sort(x).values,
    "cumsum_searchsorted": lambda x: torch.searchsorted(torch.sort(x).values, x),
    "randperm": lambda x: x[torch.randperm(64, device=x.device)],
    "clamp_tensor": lambda x: x.clamp(min=x.min()),
    "nan_to_num": lambda x: torch.nan_to_num(x),
    "masked_fill": lambda x: x.masked_fill(x > 0, 0.0),
    "tensor_from_list": lambda x: x + torch.tensor([1.0], device=x.device),
    "cholesky": lambda x: torch.linalg.cholesky(
        torch.eye(4, device=x.device) * 2 + x[:16].reshape(4, 4) @ x[:16].reshape(4, 4).T
    ).flatten(),
    "max_item_python": lambda x: x * x.max().item(),
    "len_nonzero": lambda x: x * len(torch.nonzero(x > 0)),
    "std_mean": lambda x: torch.std_mean(x)[0].expand(1),
    "isin": lambda x: torch.isin((x > 0).long(), torch.tensor([1], device=x.device)).float(),
    "bucketize": lambda x: torch.bucketize(x, torch.tensor([-1.0, 0.0, 1.0], device=x.device)).float(),
    "scatter_reduce": lambda x: torch.zeros(4, device=x.device).scatter_reduce(
        0, (x.abs() * 10).long().clamp(max=3), x, "sum"
    ),
    "index_put_accumulate": lambda x: torch.zeros(4, device=x.device).index_put_(
        ((x.abs() * 10).long().clamp(max=3),), x, accumulate=True
    ),
    "kthvalue": lambda x: torch.kthvalue(x, 3).values.expand(1),
    "median": lambda x: torch.median(x).expand(1),
    "mode": lambda x: torch.mode(x).values.expand(1),
    "diff_prepend": lambda x: torch.diff(x),
    "where3": lambda x: torch.where(x > 0, x, 0.0),
    "nonzero_static": lambda x: torch.nonzero_static(x > 0, size=64).float().sum().expand(1),
}
for name, op in ops.items():
    try:
        r = check(Case("probe_" + name, inputs, op), "cpu")
        print(f"{name:22s} {r.verdict:14s} {r.detail[:110]}")
    except Exception as e:
        print(f"{name:22s} ERROR {type(e).__name__}: {str(e)[:100]}")
