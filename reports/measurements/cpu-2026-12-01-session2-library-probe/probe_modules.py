import torch
import torch.nn.functional as F

from harness import Case, check

torch.manual_seed(0)
mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
emb = torch.nn.EmbeddingBag(10, 4, mode="sum")
ln = torch.nn.LayerNorm(8)
gru = torch.nn.GRU(8, 8, batch_first=True)


def inputs(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(2, 5, 8, generator=g).to(device)}


def mha_nomask(x):
    with torch.no_grad():
        return mha(x, x, x, need_weights=False)[0]


def sdpa(x):
    return F.scaled_dot_product_attention(x, x, x, is_causal=True)


def embbag(x):
    idx = (x.abs() * 3).long().clamp(max=9).reshape(-1)[:8]
    offsets = torch.tensor([0, 4], device=x.device)
    return emb(idx, offsets)


def layernorm(x):
    return ln(x)


def gru_fwd(x):
    with torch.no_grad():
        return gru(x)[0]


def interp(x):
    return F.interpolate(x.transpose(1, 2), scale_factor=2.0, mode="linear")


def topp(x):
    probs = torch.softmax(x.reshape(10, 8), -1)
    sp, si = torch.sort(probs, descending=True)
    cum = sp.cumsum(-1)
    sp = sp.masked_fill(cum - sp > 0.9, 0.0)
    return torch.gather(si, -1, torch.multinomial(sp, 1))


def cross_entropy(x):
    t = (x.abs() * 3).long().clamp(max=7)[..., 0].reshape(-1)
    return F.cross_entropy(x.reshape(-1, 8), t).reshape(1)


for name, op in [
    ("mha_nomask", mha_nomask),
    ("sdpa", sdpa),
    ("embedding_bag_offsets_on_device", embbag),
    ("layernorm", layernorm),
    ("gru", gru_fwd),
    ("interpolate", interp),
    ("top_p_sampling", topp),
    ("cross_entropy", cross_entropy),
]:
    r = check(Case("lib_" + name, inputs, op), "cpu")
    print(f"{name:32s} {r.verdict:14s} {r.detail[:140]}")
