"""What a capability's or a calbin deliverable's runs prove, by the kind of target they run on, in the reader's
language: the capability page, the question page and the exports all say it with these words.

On the simulator a recipe's runs prove the vendor's package, or, where its probes only drive the runtime's
calls, calculet's integration against the documented semantics (`acceptance.recipes.simulator_proves`); on an
attested board they prove the board, the only runs that test the vendor's runtime (E0, which C0 needs)."""

from collections.abc import Iterable

from django.utils.translation import gettext_lazy

from acceptance import recipes

SIMULATOR = "simulator"
HARDWARE = "hardware"
PROOF_LABELS = {
    recipes.PROVES_PACKAGE: gettext_lazy("the vendor's package on the simulator"),
    recipes.PROVES_INTEGRATION: gettext_lazy("calculet's integration against the documented semantics (simulator)"),
    recipes.PROVES_BOARD: gettext_lazy("the board"),
}
WHERE_LABELS = {SIMULATOR: gettext_lazy("On the simulator"), HARDWARE: gettext_lazy("On an attested board")}


def runs_prove(capability_slugs: Iterable[str]) -> list[tuple[str, str]]:
    """(target kind, what its runs prove) for the runs of these capabilities' recipes: each thing the simulator's
    runs prove, once, then the board's. Empty when no recipe has probes (nothing runs)."""
    on_simulator = dict.fromkeys(
        proves
        for slug in capability_slugs
        if slug in recipes.RECIPES and (proves := recipes.simulator_proves(recipes.RECIPES[slug])) is not None
    )
    if not on_simulator:
        return []
    return [*((SIMULATOR, proves) for proves in on_simulator), (HARDWARE, recipes.PROVES_BOARD)]


def labelled(rows: list[tuple[str, str]]) -> list[tuple[str, str, str, str]]:
    """(target kind, where, code, what) with `where` and `what` in the active language."""
    return [(kind, str(WHERE_LABELS[kind]), code, str(PROOF_LABELS[code])) for kind, code in rows]
