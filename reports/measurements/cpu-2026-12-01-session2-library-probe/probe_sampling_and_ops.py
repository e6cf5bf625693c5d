import torch
import torch.nn.functional as F

from harness import Case, check

torch.manual_seed(0)
lstm = torch.nn.LSTM(8, 8, batch_first=True)
conv = torch.nn.Conv1d(5, 4, 3, padding=1)
bn_train = torch.nn.BatchNorm1d(5).train()
bn_eval = torch.nn.BatchNorm1d(5).eval()


def inputs(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(2, 5, 8, generator=g).to(device)}


def nograd(m):
    def f(x):
        with torch.no_grad():
            r = m(x)
        return r[0] if isinstance(r, tuple) else r

    return f


ops = {
    "lstm": nograd(lstm),
    "conv1d": nograd(conv),
    "batchnorm_train": nograd(bn_train),
    "batchnorm_eval": nograd(bn_eval),
    "gumbel_softmax": lambda x: F.gumbel_softmax(x, tau=0.5, hard=True),
    "categorical_sample": lambda x: torch.distributions.Categorical(logits=x).sample().float(),
    "normal_rsample": lambda x: torch.distributions.Normal(x, torch.ones_like(x)).rsample(),
    "bernoulli": lambda x: torch.bernoulli(torch.sigmoid(x)),
    "randint_like": lambda x: torch.randint_like(x, 10),
    "masked_scatter": lambda x: x.masked_scatter(x > 0, torch.zeros_like(x)),
    "einsum": lambda x: torch.einsum("bij,bkj->bik", x, x),
    "roll_flip_pad": lambda x: F.pad(torch.flip(torch.roll(x, 1, -1), [-1]), (1, 1)),
    "split_sizes": lambda x: torch.cat(torch.split(x, [3, 5], -1)[::-1], -1),
    "normalize": lambda x: F.normalize(x, dim=-1),
    "cumprod_tril": lambda x: torch.tril(torch.cumprod(x[0], -1)[:5, :5]),
    "topk_indices_gather": lambda x: torch.gather(x, -1, torch.topk(x, 3).indices),
    "scatter_reduce_amax": lambda x: torch.zeros(2, 5, 4).scatter_reduce(
        -1, (x.abs() * 2).long().clamp(max=3), x, "amax", include_self=False
    ),
    "argsort_stable": lambda x: torch.argsort(x, stable=True).float(),
    "exponential_": lambda x: torch.empty_like(x).exponential_(),
    "nan_to_num_posinf": lambda x: torch.nan_to_num(x / 0.0, posinf=1.0, neginf=-1.0),
}
for name, op in ops.items():
    r = check(Case("lib_" + name, inputs, op), "cpu")
    print(f"{name:24s} {r.verdict:14s} {r.detail[:140]}")
