"""``--project-basis``: the basis fitted from a state's covariance, ``pca`` or ``standardized`` (correlation PCA).

:func:`~layercache.extraction.projection_fit.principal_rows` is the whole of the fit once the sample's
covariance is accumulated; here it is checked against scikit-learn's PCA of the same sample, raw and
standardised, and on the case the option exists for: one dimension of outsized variance.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.decomposition import PCA

import layercache as lc
from layercache.core.threads import computing_threads
from layercache.errors import CacheMismatchError
from layercache.extraction.housekeeping import locked_output
from layercache.extraction.job import join_job, prepare_job
from layercache.extraction.projection_fit import VARIANCE_FLOOR, principal_rows
from layercache.extraction.run import assign_shares, merge_shares, write_share
from layercache.extraction.specs import BatchSpec, DataSpec, StorageSpec
from layercache.store.projection import Projection

BUILTIN_SIZES = {"train": 48, "validation": 16}
"""The builtin splits the writers' test extracts (the ``small_builtin`` fixture of tests/conftest.py)."""


def _sample(n=4000, d=12, seed=0) -> np.ndarray:
    """(n, d): correlated dimensions of unequal spread, with a mean far from zero."""
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(d, d))
    return rng.normal(size=(n, d)) @ mixing * rng.uniform(0.2, 5, size=d) + rng.normal(size=d) * 10


def _cov(x: np.ndarray) -> torch.Tensor:
    """The population covariance (D, D) float64, as the fit accumulates it (divided by n)."""
    return torch.from_numpy(np.cov(x, rowvar=False, bias=True))


def _signed(rows: np.ndarray) -> np.ndarray:
    """Rows with their largest entry positive: the fit's convention, applied to scikit-learn's components."""
    return rows * np.sign(rows[np.arange(len(rows)), np.abs(rows).argmax(1)])[:, None]


@pytest.mark.parametrize("kind", ["pca", "standardized"])
def test_the_basis_is_scikit_learns_pca_of_the_raw_or_standardised_sample(kind):
    x, k = _sample(), 5
    rows, scale, kept = principal_rows(_cov(x), k, kind)
    std = x.std(0)  # (D,) population standard deviation, as the covariance's diagonal gives it
    fitted = PCA(n_components=k).fit(x if kind == "pca" else (x - x.mean(0)) / std)
    if kind == "pca":
        assert scale is None
        directions = rows.numpy()
    else:
        np.testing.assert_allclose(scale.numpy(), std, rtol=1e-10)
        directions = (rows * scale).numpy()  # the stored rows are V / sigma, column by column
    np.testing.assert_allclose(directions, _signed(fitted.components_), atol=1e-8)
    np.testing.assert_allclose(kept, fitted.explained_variance_ratio_.sum(), rtol=1e-10)


def test_standardized_coordinates_are_the_correlation_pca_scores_of_the_sample():
    """z = V ((x - mu) / sigma): the projection's own apply gives scikit-learn's transform, and on the sample
    the coordinates keep the recorded fraction of the standardised variance (D of it, one per dimension)."""
    x, k = _sample(), 4
    rows, scale, kept = principal_rows(_cov(x), k, "standardized")
    mean = torch.from_numpy(x.mean(0))
    projection = Projection(mean[None].float(), rows[None].float(), torch.tensor([kept], dtype=torch.float64),
                            kind="standardized", scale=scale[None].float())
    z = projection.apply(torch.from_numpy(x)[:, None].float())[:, 0].double().numpy()  # (n, K)
    standardised = (x - x.mean(0)) / x.std(0)
    np.testing.assert_allclose(np.abs(z), np.abs(PCA(n_components=k).fit_transform(standardised)), atol=2e-4)
    np.testing.assert_allclose(z.var(0).sum() / x.shape[1], kept, rtol=1e-4)


def test_an_outlier_dimension_takes_pcas_first_direction_but_not_the_standardised_one():
    """A dimension with 1000x the variance of the others, independent of them: PCA spends its first direction
    on it alone; standardised, the correlated dimensions (the structure of the states) come first."""
    rng = np.random.default_rng(1)
    n, d = 5000, 16
    shared = rng.normal(size=(n, 1))  # a factor eight dimensions share
    x = rng.normal(size=(n, d))
    x[:, :8] += 2 * shared
    x[:, 15] = rng.normal(size=n) * np.sqrt(1000 * x[:, :15].var(0).mean())
    pca, _, _ = principal_rows(_cov(x), 3, "pca")
    rows, scale, _ = principal_rows(_cov(x), 3, "standardized")
    assert abs(float(pca[0, 15])) > 0.999
    first = (rows * scale)[0].numpy()  # (D,) the standardised first direction
    assert abs(first[15]) < 0.05 and np.abs(first[:8]).min() > 0.3


def test_a_constant_dimension_divides_by_the_floor_not_by_zero():
    """Zero variance: scaled by the floor (never 0), the basis stays finite and gives that dimension no weight;
    a dimension that barely moves is not blown up to unit variance."""
    x = _sample(d=8)
    x[:, 3] = 7.0  # constant on the sample
    x[:, 5] = x[:, 5] * 1e-6 / x[:, 5].std()  # moves, by 1e-6 of its own spread's old size
    cov = _cov(x)
    rows, scale, kept = principal_rows(cov, 4, "standardized")
    floor = np.sqrt(VARIANCE_FLOOR * float(cov.diagonal().mean()))
    assert torch.isfinite(rows).all() and torch.isfinite(scale).all() and 0 < kept <= 1
    assert float(scale[3]) == pytest.approx(floor) and float(scale[5]) == pytest.approx(floor)
    assert float((rows * scale)[:, 3].abs().max()) < 1e-8  # no direction leans on a constant dimension
    standardised_variance = float(cov[5, 5]) / float(scale[5]) ** 2
    assert standardised_variance < 1e-3  # below the floor: not made as loud as the others
    silent = torch.zeros((4, 4), dtype=torch.float64)  # a state constant on the sample: no variance at all
    rows, scale, kept = principal_rows(silent, 2, "standardized")
    assert torch.equal(scale, torch.ones(4, dtype=torch.float64)) and torch.isfinite(rows).all() and kept == 1.0


@pytest.mark.parametrize("kind", ["pca", "standardized"])
def test_the_same_covariance_gives_the_same_rows_to_the_bit(kind):
    cov = _cov(_sample(seed=3))
    first, again = principal_rows(cov, 6, kind), principal_rows(cov.clone(), 6, kind)
    assert torch.equal(first[0], again[0]) and first[2] == again[2]


def test_writers_of_a_standardized_cache_project_with_the_prepared_basis(tiny_models, tmp_path, small_builtin):
    """The preparing writer fits the basis; a joining writer reads it (kind and scale) and writes what one writer
    writes. A writer whose options name another basis computes another configuration and is refused."""
    model, pooling, out = str(tiny_models["bert"]), ["mean"], tmp_path / "two"
    options = dict(shard_bytes=12_000, pooling=pooling, storage_dtype="int8", project=8, project_basis="standardized")
    data, storage, batching = DataSpec(dataset="builtin"), StorageSpec(**options), BatchSpec(batch_tokens=96)
    with computing_threads(1):  # one thread count for both runs: the basis is a sum whose rounding follows it
        single = lc.LayerCache.open(lc.extract(model, "builtin", tmp_path / "single", batch_tokens=96,
                                               progress=False, **options).path)
        with locked_output(out):
            first = prepare_job(model, data, storage, batching, out, pooling, overwrite=False, repair=False,
                                allow_pickle=False, progress=False)
        shares = assign_shares(first.manifest, first.plans, 2)
        second = join_job(model, data, storage, batching, out, pooling, allow_pickle=False)
        assert second.packer.projection.kind == "standardized"
        for job, share in ((second, shares[1]), (first, shares[0])):
            write_share(job, share, progress=False)
        with pytest.raises(CacheMismatchError, match=r"^This writer's projection basis \(project_basis=\.\.\.\)"):
            join_job(model, data, StorageSpec(**{**options, "project_basis": "pca"}), batching, out, pooling,
                     allow_pickle=False)
        with locked_output(out):
            merge_shares(first)
    two = lc.LayerCache.open(out)
    assert (out / "projection.safetensors").read_bytes() == (single.path / "projection.safetensors").read_bytes()
    for split in ("train", "validation"):
        rows = range(single.num_examples(split))
        for a, b in zip(single.tokens(split, rows), two.tokens(split, rows)):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(single.pooled(split, "mean"), two.pooled(split, "mean"))
