"""Every probed capability's package and five wrong ones made from it, run through the chain's stages on the
simulator (`acceptance.proof_matrix`): each wrong one fails naming why, the right one passes, and
docs/acceptance.md's matrix is what the stages give. Regenerate it with `python manage.py proof_matrix --write`.

A wrong package that passes is a hole. The ones known are marked xfail(strict=True) with their reason, so the
matrix shows them and a change that closes one fails here until its mark goes."""

import io

import pytest
from django.core.management import call_command

from acceptance import proof_matrix
from acceptance.proof_matrix import (
    BOARD_ONLY,
    CORRECT,
    FAILS,
    MUTATIONS,
    NOT_APPLICABLE,
    PASSES,
    board_only,
    probed_recipes,
)
from acceptance.recipes import PROVES_INTEGRATION, RECIPES, simulator_proves


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> dict[tuple[str, str], proof_matrix.Cell]:
    """The whole matrix, run once for the module."""
    return {(c.capability, c.mutation): c for c in proof_matrix.matrix(tmp_path_factory.mktemp("matrix"))}


# Holes whose stock package has what the probe checks: it is not a wrong delivery for them.
STOCK_HAS_IT = {
    "golden-readback": "any package the simulator builds carries its goldens, which is all the probe reads back",
    "prefill-batch-dynamic-shape": "V19 asks which prefill shapes the package supports; the stock package's "
    "dynamic profile is one answer, and the probe checks the profile the package declares",
}


def known_hole(slug: str, mutation: str) -> str | None:
    declares = any(f != "tp" for f in proof_matrix.correct_package(RECIPES[slug]).features)
    # A package that must declare a feature fails without it; with only the declaration it passes.
    if simulator_proves(RECIPES[slug]) == PROVES_INTEGRATION and mutation == (
        "declared_not_computed" if declares else "stock"
    ):
        return (
            "the probes drive the simulator's own runtime, not anything the package computes: the runs prove "
            "calculet's integration (E4), and only a board's runs reach C0"
        )
    if mutation == "stock":
        return STOCK_HAS_IT.get(slug)
    return None


def _case(slug: str, mutation: str):
    reason = known_hole(slug, mutation)
    marks = [pytest.mark.xfail(strict=True, reason=f"hole: {reason}")] if reason else []
    return pytest.param(slug, mutation, marks=marks, id=f"{slug}-{mutation}")


CASES = [_case(recipe.capability, mutation) for recipe in probed_recipes() for mutation in MUTATIONS]


@pytest.mark.parametrize(("slug", "mutation"), CASES)
def test_every_wrong_package_fails_naming_why_and_the_right_one_passes(cells, slug, mutation):
    cell = cells[(slug, mutation)]
    if board_only(RECIPES[slug]):
        # CalRT 0.7.6 drives one physical device: on the simulator even the right package is not exercised.
        if mutation == CORRECT:
            assert cell.verdict == BOARD_ONLY and "(I09)" in cell.reason, cell
        else:
            assert cell.verdict in (BOARD_ONLY, FAILS, NOT_APPLICABLE) and cell.reason, cell
        return
    if mutation == CORRECT:
        assert cell.verdict == PASSES, cell
        return
    if cell.verdict == NOT_APPLICABLE:
        assert mutation == "declared_not_computed" and cell.reason, cell
        return
    assert cell.verdict == FAILS, cell
    assert cell.reason and cell.codes, cell
    expected = {
        "stock": {"not_exercised"},
        "corrupted_weights": {"golden_mismatch", "check_failed"},
        "wrong_golden": {"golden_mismatch"},
    }.get(mutation)
    if expected:
        assert expected & set(cell.codes), cell


def test_a_declared_feature_is_not_applicable_only_where_the_recipe_asks_for_none(cells):
    for recipe in probed_recipes():
        features = proof_matrix.correct_package(recipe).features
        applicable = cells[(recipe.capability, "declared_not_computed")].verdict != NOT_APPLICABLE
        assert applicable == any(f != "tp" for f in features), recipe.capability


def test_the_doc_s_matrix_is_what_the_stages_give(cells):
    documented = proof_matrix.documented(proof_matrix.DOC.read_text(encoding="utf-8"))
    assert documented == proof_matrix.table(list(cells.values())), (
        "regenerate with: python manage.py proof_matrix --write"
    )


def test_the_command_prints_the_matrix_and_writes_it_between_the_markers(cells, tmp_path, monkeypatch):
    monkeypatch.setattr(proof_matrix, "matrix", lambda: list(cells.values()))
    generated = proof_matrix.table(list(cells.values()))
    out = io.StringIO()
    call_command("proof_matrix", stdout=out)
    assert out.getvalue().strip() == generated
    text = proof_matrix.DOC.read_text(encoding="utf-8")
    stale = tmp_path / "acceptance.md"
    stale.write_text(text.replace(generated, "| an old matrix |"), encoding="utf-8")
    monkeypatch.setattr(proof_matrix, "DOC", stale)
    call_command("proof_matrix", "--write", stdout=io.StringIO())
    assert stale.read_text(encoding="utf-8") == text
