"""The storage/stride record and its drawing, with torch's own indexing as the oracle."""
from __future__ import annotations

import itertools
import pickle
import re
import xml.etree.ElementTree as ET

import pytest
import torch

from autogradviz.ops.records import MAX_STORAGE_ELEMENTS, StorageMap
from autogradviz.ops.storage import storage_map
from autogradviz.ops.storage_view import render_storage_svg

SVG_NS = "{http://www.w3.org/2000/svg}"


def base() -> torch.Tensor:
    """3 x 4 with distinct values that are not their own storage indices, so a value
    found in the storage pins down the one index it sits at."""
    return (torch.randperm(12, generator=torch.Generator().manual_seed(0)).float() + 0.5
            ).view(3, 4)


def wide() -> torch.Tensor:
    return torch.arange(24.0).view(2, 3, 4) * 1.5 - 7.0


#: (name, tensor made from `base()` or `wide()`): views of every kind the chapter draws.
VIEWS = {
    "x": lambda: base(),
    "x.t()": lambda: base().t(),
    "x[:, 1:3]": lambda: base()[:, 1:3],
    "x[1:, ::2]": lambda: base()[1:, ::2],
    "x[2]": lambda: base()[2],
    "x[1, 2]": lambda: base()[1, 2],
    "x[0].expand(3, 4)": lambda: base()[0].expand(3, 4),
    "x[:, :1].expand(3, 5)": lambda: base()[:, :1].expand(3, 5),
    "x.view(4, 3)": lambda: base().view(4, 3),
    "x.diagonal()": lambda: base().diagonal(),
    "x.diagonal(1)": lambda: base().diagonal(1),
    "x.flatten().unfold(0, 3, 2)": lambda: base().flatten().unfold(0, 3, 2),
    "w.permute(2, 0, 1)": lambda: wide().permute(2, 0, 1),
    "w[1:, :, 1::2]": lambda: wide()[1:, :, 1::2],
    "w.transpose(0, 2)[1]": lambda: wide().transpose(0, 2)[1],
    "as_strided": lambda: torch.as_strided(base(), (2, 3), (1, 3), 2),
    "x[:, :0]": lambda: base()[:, :0],
}


def storage_of(t: torch.Tensor) -> torch.Tensor:
    """Every element of t's storage, read by torch.as_strided from offset 0."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return torch.as_strided(t, (n,), (1,), 0)


@pytest.mark.parametrize("name", list(VIEWS))
def test_each_element_reads_the_storage_index_torch_reads(name):
    t = VIEWS[name]()
    m = storage_map(t, names=[name])
    lay, block = m.tensors[0], m.storages[0]
    storage = storage_of(t)
    assert list(block.values) == storage.tolist()
    assert (lay.shape, lay.stride, lay.storage_offset) == (
        tuple(t.shape), t.stride(), t.storage_offset())
    assert lay.contiguous == t.is_contiguous()
    positions = list(itertools.product(*(range(n) for n in t.shape)))
    assert len(lay.indices) == len(positions) == t.numel()
    for pos, k in zip(positions, lay.indices):
        assert block.values[k] == storage[k].item() == t[pos].item(), (pos, k)
        # Values are distinct, so torch's own element sits at exactly this index.
        assert torch.nonzero(storage == t[pos]).flatten().tolist() == [k]


def test_expand_reads_one_cell_many_times():
    x = base()
    lay = storage_map(x[0].expand(3, 4)).tensors[0]
    assert lay.stride == (0, 1) and lay.numel == 12 and lay.cells_read == 4
    assert lay.indices == (0, 1, 2, 3) * 3


def test_grouping_follows_storage_data_ptr():
    x = base()
    ts = {"x": x, "x.t()": x.t(), "x.reshape(12)": x.reshape(12),
          "x.t().reshape(-1)": x.t().reshape(-1), "x.t().contiguous()": x.t().contiguous(),
          "x.contiguous()": x.contiguous(), "x[1:]": x[1:], "other": base()}
    m = storage_map(*ts.values(), names=list(ts))
    for (a, ta), (b, tb) in itertools.product(ts.items(), repeat=2):
        same = ta.untyped_storage().data_ptr() == tb.untyped_storage().data_ptr()
        assert m.shares(a, b) == same, (a, b)
    # reshape copies only when no strides fit; contiguous() of a contiguous tensor is itself.
    assert m.shares("x", "x.reshape(12)") and m.shares("x", "x.contiguous()")
    assert not m.shares("x", "x.t().reshape(-1)") and not m.shares("x", "x.t().contiguous()")
    assert not m.shares("x.t().reshape(-1)", "x.t().contiguous()")
    assert len(m.storages) == 4 and [s.label for s in m.storages] == ["A", "B", "C", "D"]
    assert m.storage_of("x[1:]").numel == 12  # a slice reads the whole base storage


def test_a_copy_is_another_storage_with_the_same_values_in_a_new_order():
    x = base()
    m = storage_map(x, x.t().contiguous(), names=["x", "c"])
    c = m.storage_of("c")
    assert c.index == 1 and list(c.values) == x.t().flatten().tolist()
    assert m.tensor("c").indices == tuple(range(12)) and m.tensor("c").contiguous


def test_record_is_plain_python():
    x = base().requires_grad_()
    m = storage_map(x, x.t(), names=["x", "x.t()"])
    assert all(type(v) is float for v in m.storages[0].values)
    assert pickle.loads(pickle.dumps(m)) == m
    assert repr(m) == "StorageMap(2 tensors over 1 storage)"
    assert m.storages[0].caption() == "storage A · 12 × float32 · 48 B"


def texts(svg: str) -> list[str]:
    return [el.text or "" for el in ET.fromstring(svg).iter(f"{SVG_NS}text")]


def test_svg_is_well_formed_deterministic_and_labelled():
    names = list(VIEWS)
    m = storage_map(*(VIEWS[n]() for n in names), names=names)
    svg = m.svg()
    assert svg == m.svg() == m._repr_svg_()
    assert svg == storage_map(*(VIEWS[n]() for n in names), names=names).svg()
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG_NS}svg"
    shown = texts(svg)
    for lay in m.tensors:
        assert lay.name in shown
        shape = f"({lay.shape[0]},)" if len(lay.shape) == 1 else str(lay.shape)
        assert any(s.startswith(f"shape {shape}") for s in shown), lay.name
        assert f"contiguous: {'yes' if lay.contiguous else 'no'}" in shown


def test_svg_cells_name_the_storage_index_and_wrap_to_the_width():
    x = base()
    views = [x, x.t(), x[:, 1:3], x[0].expand(3, 4), x.view(4, 3), x.diagonal()]
    m = storage_map(*views, names=[f"v{i}" for i in range(len(views))])
    svg = render_storage_svg(m, max_width=420)
    root = ET.fromstring(svg)
    assert int(root.get("width")) <= 420
    tips = [el.text for el in root.iter(f"{SVG_NS}title")]
    assert f"v1[2, 0] reads storage A[2] = {x[0, 2].item()!r}" in tips  # x.t()[2, 0]
    assert all(f"v3[{i}, 1] reads storage A[1] = {x[0, 1].item()!r}" in tips for i in range(3))
    assert f"v2[0, 0] reads storage A[1] = {x[0, 1].item()!r}" in tips  # offset 1


def test_svg_escapes_names_and_draws_edge_cases():
    svg = storage_map(torch.tensor(3.0), torch.zeros(0), torch.arange(40)[::3],
                      names=["<a & b>", "empty", "long"]).svg(max_width=200)
    shown = texts(svg)
    assert "<a & b>" in shown and "(no elements)" in shown and "shape (14,) (wrapped)" in shown
    assert "storage_offset + Σ index_k × stride_k" in shown


@pytest.mark.parametrize("bad, error, words", [
    ([1, 2], TypeError, "is a list"),
    (torch.eye(3).to_sparse(), ValueError, "to_dense"),
    (torch.empty(3, 4, device="meta"), ValueError, "meta tensor"),
    (torch.zeros(MAX_STORAGE_ELEMENTS + 1), ValueError, "smaller tensor"),
    (torch.zeros(1000)[:3], ValueError, ".clone()"),
    (torch.zeros(1).expand(300), ValueError, "smaller tensor"),
])
def test_bad_input_is_refused_clearly(bad, error, words):
    with pytest.raises(error, match=re.escape(words)):
        storage_map(bad)


def test_bad_names_and_mixed_dtypes_are_refused():
    x = base()
    with pytest.raises(ValueError, match="at least one"):
        storage_map()
    with pytest.raises(ValueError, match="one per tensor"):
        storage_map(x, x.t(), names=["x"])
    with pytest.raises(ValueError, match="distinct"):
        storage_map(x, x.t(), names=["x", "x"])
    with pytest.raises(ValueError, match="share a storage but not a dtype"):
        storage_map(x, x.view(torch.int32), names=["x", "bits"])
    with pytest.raises(ValueError, match="at least 120"):
        storage_map(x).svg(max_width=50)


def test_record_lookup_errors_name_the_tensors():
    m: StorageMap = storage_map(base(), names=["x"])
    with pytest.raises(KeyError, match="names are"):
        m.tensor("y")
