"""The newest run of each chain's stages, which every page that shows a chain reads."""

import pytest

from acceptance import stages
from acceptance.selectors import latest_runs
from evidence.models import Capability
from tests.factories import make_chain, make_run, put_to
from vendor.models import Question


@pytest.mark.django_db
def test_the_newest_run_of_each_stage_in_one_query_however_many_chains(
    pm, acme, acme_engineer, checklist, django_assert_num_queries
):
    put_to(pm, acme, "V18")
    question = Question.objects.get(code="V18")
    chains = [
        make_chain(question, acme_engineer, capability=capability)
        for capability in Capability.objects.filter(deliverables__question=question).distinct().order_by("slug")
    ]
    newest = {}
    for chain in chains:
        make_run(chain, stages.CLAIM, stages.PASSED)
        make_run(chain, stages.GOLDEN, stages.FAILED)
        newest[(chain.pk, stages.GOLDEN)] = make_run(chain, stages.GOLDEN, stages.PASSED).pk
        newest[(chain.pk, stages.CLAIM)] = make_run(chain, stages.CLAIM, stages.FAILED).pk  # a re-run, newer
    with django_assert_num_queries(1):
        found = latest_runs([chain.pk for chain in chains])
    assert {key: run.pk for key, run in found.items()} == newest
    assert len(chains) == 3 and found[(chains[0].pk, stages.CLAIM)].state == stages.FAILED
    with django_assert_num_queries(1):
        assert latest_runs([chains[0].pk], states_only=True).keys() == {
            (chains[0].pk, stages.CLAIM),
            (chains[0].pk, stages.GOLDEN),
        }
