"""A question's deliverables and the PM's document reviews."""

from django.utils.translation import gettext_noop
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.response import Response

from acceptance.inputs import (
    REVIEW_NOTE_MAX_CHARS,
    REVIEW_REASON_MAX_CHARS,
    DocumentReviewDraft,
    ElementVerdict,
    ItemCheck,
)
from acceptance.selectors import question_deliverables
from acceptance.services.reviews import document_review
from calculet.api import Api, StrictSerializer
from calculet.errors import NotFoundError
from vendor.access import object_for_user
from vendor.claim import ELEMENT_VERDICTS, ELEMENTS
from vendor.models import Deliverable, Question
from vendor.selectors import question_list


class ReviewItemInputSerializer(StrictSerializer):
    ticked = serializers.BooleanField(help_text="Whether the document shows the checklist item to hold.")
    note = serializers.CharField(allow_blank=True, required=False, max_length=REVIEW_NOTE_MAX_CHARS)


class ElementVerdictInputSerializer(StrictSerializer):
    verdict = serializers.ChoiceField(
        choices=ELEMENT_VERDICTS,
        help_text="present: the element applies and the answer holds it (if the answer lacks it, the review "
        "rejects the document); not_applicable: it does not apply to this document, and the reason says why.",
    )
    reason = serializers.CharField(
        allow_blank=True, required=False, max_length=REVIEW_NOTE_MAX_CHARS, help_text="Required when not_applicable."
    )


class ElementVerdictsInputSerializer(StrictSerializer):
    """A verdict on each of section 13's six elements."""

    def get_fields(self):
        return {element: ElementVerdictInputSerializer() for element in ELEMENTS}


class ReviewInputSerializer(StrictSerializer):
    items = ReviewItemInputSerializer(
        many=True, help_text="One entry per item of the deliverable's checklist, in the checklist's order."
    )
    elements = ElementVerdictsInputSerializer(
        help_text="Section 13's six elements, each present or not applicable with the reason."
    )
    reason = serializers.CharField(max_length=REVIEW_REASON_MAX_CHARS)

    def draft(self) -> DocumentReviewDraft:
        """The validated review as the service takes it, the elements in section 13's order."""
        data = self.validated_data
        return DocumentReviewDraft(
            items=tuple(ItemCheck(ticked=item["ticked"], note=item.get("note", "")) for item in data["items"]),
            elements=tuple(
                ElementVerdict(
                    element=element,
                    verdict=data["elements"][element]["verdict"],
                    reason=data["elements"][element].get("reason", ""),
                )
                for element in ELEMENTS
            ),
            reason=data["reason"],
        )


class ReviewItemSerializer(serializers.Serializer):
    item = serializers.CharField()
    ticked = serializers.BooleanField()
    note = serializers.CharField()


class ElementVerdictSerializer(serializers.Serializer):
    verdict = serializers.ChoiceField(choices=ELEMENT_VERDICTS)
    reason = serializers.CharField()


class ElementVerdictsSerializer(serializers.Serializer):
    def get_fields(self):
        return {element: ElementVerdictSerializer() for element in ELEMENTS}


class ReviewOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    deliverable = serializers.CharField(source="deliverable.key")
    answer = serializers.IntegerField(source="answer_id")
    reviewer = serializers.CharField(source="reviewer.username", allow_null=True, default=None)
    items = ReviewItemSerializer(many=True)
    elements = ElementVerdictsSerializer(
        help_text="Section 13's six elements as the reviewer judged them; empty on reviews recorded before "
        "elements were judged."
    )
    reason = serializers.CharField()
    accepted = serializers.BooleanField(
        help_text="True when every checklist item holds and every element that applies is in the answer: the "
        "document is accepted."
    )
    created_at = serializers.DateTimeField()


class RunProofSerializer(serializers.Serializer):
    target_kind = serializers.CharField(help_text="simulator or hardware")
    code = serializers.CharField(help_text="package, integration or board")
    label = serializers.CharField(help_text="what the runs there prove, in the request's language")


class DeliverableOutputSerializer(serializers.Serializer):
    key = serializers.SlugField(source="deliverable.key")
    kind = serializers.ChoiceField(source="deliverable.kind", choices=Deliverable.KINDS)
    title = serializers.CharField(source="deliverable.title")
    state = serializers.ChoiceField(source="deliverable.state", choices=Deliverable.STATES)
    reason = serializers.CharField(source="deliverable.reason")
    decided_at = serializers.DateTimeField(source="deliverable.decided_at", allow_null=True)
    capabilities = serializers.SerializerMethodField()
    checklist = serializers.ListField(source="deliverable.checklist", child=serializers.CharField())
    schema_of = serializers.CharField(source="deliverable.schema_of")
    progress = serializers.DictField(
        child=serializers.CharField(),
        help_text="calbin only: per target kind (simulator, hardware), passed, failed, running or none: whether "
        "a chain of an answer naming this deliverable, from the organisation the question is put to, passed "
        "every stage there.",
    )
    answered = serializers.BooleanField(
        help_text="Whether an answer of the organisation the question is put to names this deliverable."
    )
    alternatives = serializers.ListField(
        child=serializers.SlugField(),
        help_text="The keys of the question's other deliverables this one is an alternative of: either it or one "
        "of them accepted is enough (V45: the SDK with both calls, or the erratum).",
    )
    runs_prove = serializers.SerializerMethodField(
        help_text="calbin only: what its runs prove on each kind of target (the vendor's package or calculet's "
        "integration against the documented semantics on the simulator; the board on an attested board)."
    )
    reviews = ReviewOutputSerializer(many=True)

    def get_capabilities(self, view) -> list[str]:
        return [capability.slug for capability in view.deliverable.capabilities.all()]

    @extend_schema_field(RunProofSerializer(many=True))
    def get_runs_prove(self, view) -> list[dict]:
        return [{"target_kind": kind, "code": code, "label": what} for kind, _where, code, what in view.proof_rows]


def _question(user, code: str) -> Question:
    return object_for_user(user, question_list(user=user), code=code.upper())


def _deliverable(question: Question, key: str) -> Deliverable:
    deliverable = question.deliverables.filter(key=key).first()
    if deliverable is None:
        raise NotFoundError(
            gettext_noop("%(question)s has no deliverable %(key)s."),
            field="key",
            params={"question": question.code, "key": key},
        )
    return deliverable


class DeliverableListApi(Api):
    pagination_class = None  # a question owes a handful of things: listed whole

    @extend_schema(responses=DeliverableOutputSerializer(many=True))
    def get(self, request, code):
        """What the question must deliver, each with its state and, for a calbin, its progress per target kind."""
        views = question_deliverables(_question(request.user, code))
        return Response(DeliverableOutputSerializer(views, many=True).data)


class DeliverableReviewApi(Api):
    @extend_schema(request=ReviewInputSerializer, responses={201: ReviewOutputSerializer})
    def post(self, request, code, key):
        """A PM's review of a document deliverable: accepted when every checklist item holds and each of
        section 13's elements is present in the answer or does not apply (with the reason), rejected
        otherwise; recorded as E3 evidence; never moves a capability."""
        question = _question(request.user, code)
        deliverable = _deliverable(question, key)
        serializer = ReviewInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        review = document_review(actor=request.user, deliverable=deliverable, draft=serializer.draft())
        return Response(ReviewOutputSerializer(review).data, status=status.HTTP_201_CREATED)
