"""What each finding code a run or a check stores means, in the reader's language. A finding keeps its code
and the sentence its writer gave (calculet's judging, the runner's own words); the pages name the code by
this label, so a Chinese reader sees what kind of failure it is, whatever language the sentence is in."""

from django.utils.translation import gettext_lazy as _

FINDING_LABELS = {
    # The runner's probes (npu_sim and a board's runner alike).
    "not_exercised": _("not exercised by the package"),
    # calculet's judging of the measurements (acceptance/judging.py).
    "claim_unsupported": _("pass not supported by the measurements"),
    "no_reference": _("no reference to compare with"),
    "no_float_reference": _("no float model reference"),
    "float_mismatch": _("differs from the float model"),
    "no_measurement": _("measurement missing"),
    "reference_mismatch": _("differs from the reference"),
    "golden_mismatch": _("differs from the golden"),
    "sampling_mismatch": _("sampling differs from the reference"),
    "not_greedy": _("not greedy decoding"),
    "wrong_prompt": _("wrong prompt"),
    "wrong_recovery": _("wrong recovery"),
    "not_recovered": _("not recovered"),
    "no_fault_effect": _("the fault had no effect"),
    "nothing_injected": _("no fault injected"),
    "corruption_unseen": _("corruption not detected"),
    "kv_not_released": _("KV cache not released"),
    "logits_not_finite": _("logits not finite"),
    "incomplete": _("incomplete"),
    "duplicate_requests": _("duplicate requests"),
    "errors_in_service": _("errors in the service"),
    "errors_under_load": _("errors under load"),
    "too_few_requests": _("too few requests"),
    "scenario_unmeasured": _("scenario not measured"),
    # The in-process checks (acceptance/services/checks.py).
    "element_missing": _("section 13 element missing"),
    "calbin_missing": _("no calbin package"),
    "artifact_unverified": _("artifact not verified"),
    "bundle_unsafe": _("unsafe bundle"),
    "capability_unresolved": _("capability not resolved"),
    "runner_manifest_invalid": _("runner manifest invalid"),
    "runner_manifest_missing": _("runner manifest missing"),
    "target_incompatible": _("target incompatible"),
}

# What each reason the promotion gate gives (acceptance/policy.py) is about, in the reader's language: the
# audit log lists a promotion's reasons by these labels (the sentences are on the capability's page).
GATE_REASON_LABELS = {
    "no_change": _("already at that status"),
    "approval_missing": _("approvals missing"),
    "no_answer": _("no complete answer"),
    "answer_incomplete": _("answer incomplete"),
    "version_missing": _("no version named"),
    "wrong_deliverable": _("not a deliverable of the capability"),
    "deliverable_owed": _("deliverable owed"),
    "deliverable_rejected": _("deliverable rejected"),
    "no_target": _("no chain on a target"),
    "stage_not_passed": _("stage not passed"),
    "stage_stale": _("stage stale"),
    "probe_failed": _("probe failed"),
    "probe_not_passed": _("probe not passed"),
    "grade_not_e0": _("not E0 evidence"),
    "no_hardware_runs": _("no E0 runs"),
    "no_static_check": _("no passed static check"),
    "static_check_not_e1": _("static check below E1"),
    "no_sdk_evidence": _("no current E2 evidence"),
    "pinned_never_promoted": _("pinned: never promoted"),
    "pinned_needs_full_proof": _("pinned until fully proven"),
}
