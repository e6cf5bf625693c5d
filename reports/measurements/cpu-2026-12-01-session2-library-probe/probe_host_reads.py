import torch

from harness import Case, check


def inputs(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(64, generator=g).to(device)}


ops = {
    "str_tensor": lambda x: (str(x), x + 1)[1],
    "contains": lambda x: x * 2 if 0.5 in x else x,
    "index_python_int": lambda x: x[: int(x.argmax())],
    "max_python": lambda x: x * max(x[:3]),
    "list_tensor": lambda x: torch.stack(list(x[:4])),
    "numpy": lambda x: x + float(x.numpy().sum()) if x.device.type == "cpu" else x,
    "allclose": lambda x: x * (1.0 if torch.allclose(x, x) else 2.0),
}
for name, op in ops.items():
    r = check(Case("probe_" + name, inputs, op), "cpu")
    print(f"{name:22s} {r.verdict:14s} {r.detail[:120]}")
