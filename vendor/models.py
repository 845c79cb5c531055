import uuid

from django.conf import settings
from django.db import models
from django.db.models import Exists, OuterRef, Q
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from vendor import events, states


class Organisation(models.Model):
    INTEGRATOR = "integrator"
    VENDOR = "vendor"
    KINDS = [(INTEGRATOR, _("Integration team")), (VENDOR, _("Vendor"))]

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=KINDS)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=["integrator", "vendor"]), name="organisation_kind_valid"),
        ]

    def __str__(self):
        return self.name


class Membership(models.Model):
    """A user's organisation and role. Every user who may act has exactly one."""

    PM = "pm"
    VENDOR = "vendor"
    OPERATOR = "operator"
    VIEWER = "viewer"
    ROLES = [(PM, _("PM")), (VENDOR, _("Vendor engineer")), (OPERATOR, _("Operator")), (VIEWER, _("Viewer"))]

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership")
    organisation = models.ForeignKey(Organisation, on_delete=models.PROTECT, related_name="memberships")
    role = models.CharField(max_length=20, choices=ROLES)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(role__in=["pm", "vendor", "operator", "viewer"]), name="membership_role_valid"
            ),
        ]

    def __str__(self):
        return f"{self.user} ({self.role} at {self.organisation.slug})"


class ApiToken(models.Model):
    """A named API key. Only its SHA-256 is stored; the key is shown once, at creation."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"


class Section(models.Model):
    """One of the checklist sections 12.1–12.8."""

    code = models.CharField(max_length=8, unique=True)
    position = models.PositiveSmallIntegerField(unique=True)
    title = models.CharField(max_length=200)
    theme = models.CharField(max_length=200)
    blocks = models.CharField(max_length=200, blank=True)
    question_header = models.CharField(max_length=100)
    acceptance_header = models.CharField(max_length=100)

    class Meta:
        ordering = ["position"]

    def __str__(self):
        return f"{self.code} {self.title}"


class Question(models.Model):
    code = models.CharField(max_length=8, unique=True)
    number = models.PositiveSmallIntegerField(unique=True)
    section = models.ForeignKey(Section, on_delete=models.PROTECT, related_name="questions")
    question = models.TextField()
    acceptance = models.TextField()
    state = models.CharField(max_length=20, choices=states.QUESTION_STATES, default=states.NEW)
    priority = models.CharField(max_length=4, choices=states.PRIORITIES, default="p2")
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="assigned_questions"
    )
    organisation = models.ForeignKey(
        Organisation, null=True, blank=True, on_delete=models.PROTECT, related_name="questions"
    )
    due_date = models.DateField(null=True, blank=True)
    # Why a PM deferred the question or will not fix it; cleared when it moves on.
    state_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["number"]
        constraints = [
            models.CheckConstraint(condition=Q(code__regex=r"^V[0-9]{2}$"), name="question_code_format"),
            models.CheckConstraint(
                condition=Q(state__in=[s for s, _ in states.QUESTION_STATES]), name="question_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(priority__in=[p for p, _ in states.PRIORITIES]), name="question_priority_valid"
            ),
        ]

    def __str__(self):
        return self.code


class Blob(models.Model):
    """Verified bytes, stored once per content digest."""

    sha256 = models.CharField(max_length=64, unique=True)
    size = models.PositiveBigIntegerField()
    storage_name = models.CharField(max_length=300, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(sha256__regex=r"^[0-9a-f]{64}$"), name="blob_sha256_hex"),
        ]

    def __str__(self):
        return self.sha256


class Artifact(models.Model):
    CALBIN = "calbin"
    SDK = "sdk"
    CONTAINER_IMAGE = "container_image"
    GOLDEN = "golden"
    RUNNER_BUNDLE = "runner_bundle"
    DOCUMENT = "document"
    SCHEMA = "schema"
    ONNX = "onnx"
    TOOL = "tool"
    KINDS = [
        (CALBIN, _("calbin package")),
        (SDK, _("SDK")),
        (CONTAINER_IMAGE, _("container image")),
        (GOLDEN, _("golden tensors")),
        (RUNNER_BUNDLE, _("runner bundle")),
        (DOCUMENT, _("document")),
        (SCHEMA, _("JSON Schema")),
        (ONNX, _("ONNX model")),
        (TOOL, _("tool calculet runs")),
    ]

    PENDING = "pending"
    # Stored, while a worker inspects the compressed archive it is (off the request path).
    VERIFYING = "verifying"
    VERIFIED = "verified"
    REJECTED = "rejected"
    STATES = [
        (PENDING, pgettext_lazy("artifact state", "Pending")),
        (VERIFYING, pgettext_lazy("artifact state", "Verifying")),
        (VERIFIED, pgettext_lazy("artifact state", "Verified")),
        (REJECTED, pgettext_lazy("artifact state", "Rejected")),
    ]

    organisation = models.ForeignKey(Organisation, on_delete=models.PROTECT, related_name="artifacts")
    kind = models.CharField(max_length=20, choices=KINDS)
    version = models.CharField(max_length=100)
    file_name = models.CharField(max_length=255)
    declared_size = models.PositiveBigIntegerField()
    declared_sha256 = models.CharField(max_length=64)
    blob = models.ForeignKey(Blob, null=True, blank=True, on_delete=models.PROTECT, related_name="artifacts")
    state = models.CharField(max_length=20, choices=STATES, default=PENDING)
    rejection_reason = models.TextField(blank=True)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="uploaded_artifacts"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    verified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    kind__in=[
                        "calbin",
                        "sdk",
                        "container_image",
                        "golden",
                        "runner_bundle",
                        "document",
                        "schema",
                        "onnx",
                        "tool",
                    ]
                ),
                name="artifact_kind_valid",
            ),
            models.CheckConstraint(
                condition=Q(state__in=["pending", "verifying", "verified", "rejected"]), name="artifact_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(declared_sha256__regex=r"^[0-9a-f]{64}$"), name="artifact_declared_sha256_hex"
            ),
            models.CheckConstraint(
                condition=~Q(state="verified") | Q(blob__isnull=False, verified_at__isnull=False),
                name="artifact_verified_has_blob",
            ),
            # A version, once verified (or while verifying), names one content: different bytes need a new version.
            models.UniqueConstraint(
                fields=["organisation", "kind", "file_name", "version"],
                condition=Q(state__in=["verifying", "verified"]),
                name="artifact_verified_version_unique",
            ),
        ]

    def __str__(self):
        return f"{self.file_name} {self.version}"

    @property
    def stored_blob(self) -> "Blob":
        """The bytes as stored: a verifying or verified artifact has them; anything else asking is a bug."""
        if self.blob is None:
            raise ValueError(f"artifact {self.pk} ({self.state}) has no stored bytes")
        return self.blob


class DeliverableQuerySet(models.QuerySet["Deliverable"]):
    def owed(self) -> "DeliverableQuerySet":
        """Those still owed: not accepted, and no alternative of theirs (the same `either`) accepted either."""
        accepted_alternative = Deliverable.objects.filter(
            question=OuterRef("question"), either=OuterRef("either"), state=Deliverable.ACCEPTED
        ).exclude(either="")
        return self.exclude(state=Deliverable.ACCEPTED).exclude(Exists(accepted_alternative))


def deliverables_still_owed(deliverables: list["Deliverable"]) -> list["Deliverable"]:
    """`DeliverableQuerySet.owed` over one question's deliverables already read."""
    accepted = {d.either for d in deliverables if d.either and d.state == Deliverable.ACCEPTED}
    return [d for d in deliverables if d.state != Deliverable.ACCEPTED and d.either not in accepted]


class Deliverable(models.Model):
    """One thing a question's answer must deliver, accepted according to its kind (docs/acceptance.md).

    A question closes only when every one of its deliverables is accepted (vendor.services.deliverables), or,
    for deliverables that are alternatives of each other (the same `either`), one of them: V45 closes on the
    calls in a named SDK version or on the erratum removing them from the documentation.
    """

    CALBIN = "calbin"
    SDK = "sdk"
    CONTAINER_IMAGE = "container_image"
    SCHEMA = "schema"
    ONNX = "onnx"
    TOOL = "tool"
    DOCUMENT = "document"
    KINDS = [
        (CALBIN, _("calbin package")),
        (SDK, _("SDK headers and library")),
        (CONTAINER_IMAGE, _("container image")),
        (SCHEMA, _("machine-readable schema")),
        (ONNX, _("ONNX model file")),
        (TOOL, _("tool calculet runs")),
        (DOCUMENT, _("document")),
    ]

    OWED = "owed"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    STATES = [
        (OWED, pgettext_lazy("deliverable state", "Owed")),
        (ACCEPTED, pgettext_lazy("deliverable state", "Accepted")),
        (REJECTED, pgettext_lazy("deliverable state", "Rejected")),
    ]

    question = models.ForeignKey(Question, on_delete=models.PROTECT, related_name="deliverables")
    key = models.SlugField(max_length=100)
    kind = models.CharField(max_length=20, choices=KINDS)
    title = models.CharField(max_length=300)
    position = models.PositiveSmallIntegerField(default=0)
    state = models.CharField(max_length=20, choices=STATES, default=OWED)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True)
    # Document deliverables: the items a PM ticks when reviewing the document.
    checklist = models.JSONField(default=list, blank=True)
    # Schema deliverables: what the schema describes ("package-metadata" or "trace").
    schema_of = models.CharField(max_length=40, blank=True)
    # Package-metadata schema deliverables: the fix their question asks of the schema (evidence.seed.deliverables'
    # SCHEMA_ASKS: V47 "version", V48 "units", V33 "A16", V43 "A17", V46 "compatibility"), checked besides V08's.
    schema_asks = models.CharField(max_length=20, blank=True)
    # Container image deliverables of V07: the SBOM must list the image's components by file and SHA-256.
    image_sbom_components = models.BooleanField(default=False)
    # Container image deliverables of V01: [component, commit prefix] pairs the seed records (C03 calcc, C04 TVM);
    # the image holds the first one's executable and its SBOM gives each at its commit. A list: JSONB keeps no
    # key order.
    image_commits = models.JSONField(default=list, blank=True)
    # ONNX deliverables (V04): the prefix of the SHA-256 the seed records for the file (C02).
    sha256_prefix = models.CharField(max_length=64, blank=True)
    # Tool deliverables: what calculet runs the tool on ("onnx": V05's checker, on valid and invalid models).
    tool_runs_on = models.CharField(max_length=20, blank=True)
    # Alternatives: the deliverables of a question with the same `either` are owed as one, any of them enough.
    either = models.CharField(max_length=50, blank=True)

    objects = DeliverableQuerySet.as_manager()

    class Meta:
        ordering = ["question__number", "position", "key"]
        constraints = [
            models.UniqueConstraint(fields=["question", "key"], name="deliverable_key_unique"),
            models.CheckConstraint(
                condition=Q(kind__in=["calbin", "sdk", "container_image", "schema", "onnx", "tool", "document"]),
                name="deliverable_kind_valid",
            ),
            models.CheckConstraint(
                condition=Q(state="owed", decided_at__isnull=True)
                | Q(state__in=["accepted", "rejected"], decided_at__isnull=False),
                name="deliverable_decided_has_time",
            ),
            models.CheckConstraint(
                condition=~Q(kind="schema") | Q(schema_of__in=["package-metadata", "trace"]),
                name="deliverable_schema_names_subject",
            ),
        ]

    def __str__(self):
        return f"{self.question.code} {self.key}"


class Answer(models.Model):
    """One revision of an organisation's answer to a question, with section 13's six elements.

    Immutable once stored: a correction is a new revision.
    """

    question = models.ForeignKey(Question, on_delete=models.PROTECT, related_name="answers")
    # What this answer delivers; None only for answers written before questions had deliverables.
    deliverable = models.ForeignKey(
        Deliverable, null=True, blank=True, on_delete=models.PROTECT, related_name="answers"
    )
    organisation = models.ForeignKey(Organisation, on_delete=models.PROTECT, related_name="answers")
    revision = models.PositiveIntegerField()
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="answers")
    summary = models.TextField(blank=True)
    # The six elements of section 13.
    version = models.CharField(max_length=100, blank=True)
    executable_assets = models.ManyToManyField(Artifact, blank=True, related_name="executable_in_answers")
    minimal_example_artifact = models.ForeignKey(
        Artifact, null=True, blank=True, on_delete=models.PROTECT, related_name="example_in_answers"
    )
    minimal_example_command = models.TextField(blank=True)
    minimal_example_description = models.TextField(blank=True)
    error_paths = models.JSONField(default=list, blank=True)
    golden_artifacts = models.ManyToManyField(Artifact, blank=True, related_name="golden_in_answers")
    golden_tolerances = models.JSONField(default=dict, blank=True)
    compatibility = models.JSONField(default=dict, blank=True)
    # Thresholds the later stages are held to (for example soak's required decode token/s).
    thresholds = models.JSONField(default=dict, blank=True)
    complete = models.BooleanField(default=False)
    missing = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["question__number", "-revision"]
        constraints = [
            models.UniqueConstraint(fields=["question", "organisation", "revision"], name="answer_revision_unique"),
            models.CheckConstraint(condition=Q(revision__gte=1), name="answer_revision_positive"),
        ]

    def __str__(self):
        return f"{self.question.code} answer r{self.revision}"


class DocumentReview(models.Model):
    """A PM's review of a document deliverable against its checklist and section 13's elements: who, when,
    each item ticked or not (with a note), each element present or not applicable (with why), and the reason.
    Written only by `acceptance.services.reviews.document_review`."""

    deliverable = models.ForeignKey(Deliverable, on_delete=models.PROTECT, related_name="reviews")
    answer = models.ForeignKey(Answer, on_delete=models.PROTECT, related_name="document_reviews")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    # One entry per checklist item, in order: {"item": text, "ticked": bool, "note": text}.
    items = models.JSONField(default=list)
    # Section 13's six elements, each {"verdict": "present" or "not_applicable", "reason": text}: a document
    # may lack an element only when the reviewer says why it does not apply.
    elements = models.JSONField(default=dict)
    reason = models.TextField()
    accepted = models.BooleanField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"review of {self.deliverable} ({'accepted' if self.accepted else 'rejected'})"


class Upload(models.Model):
    """A resumable (tus 1.0) upload in progress. Its bytes live in a file under UPLOAD_TEMP_DIR until the
    last byte arrives; then they become an Artifact (verified, or rejected with the reason)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organisation = models.ForeignKey(Organisation, on_delete=models.CASCADE, related_name="uploads")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="uploads")
    length = models.PositiveBigIntegerField()
    offset = models.PositiveBigIntegerField(default=0)
    # The validated Upload-Metadata: kind, version, filename, sha256.
    metadata = models.JSONField(default=dict)
    # The SHA-256 of the first `offset` bytes, as a resumable state (rehashes), written with `offset`: the
    # next chunk, in whichever web worker, continues it without reading what is stored.
    hash_state = models.BinaryField(default=b"", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    # Several uploads of the same bytes under the same name and version end in the same artifact.
    artifact = models.ForeignKey(Artifact, null=True, blank=True, on_delete=models.SET_NULL, related_name="uploads")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(offset__lte=models.F("length")), name="upload_offset_within_length"),
        ]

    def __str__(self):
        return f"upload {self.id}"


class Comment(models.Model):
    """A message in a question's thread, which the integration team shares with the vendor the question is put
    to. The text is Markdown; every edit keeps the text it replaces as a `CommentRevision`."""

    question = models.ForeignKey(Question, on_delete=models.PROTECT, related_name="comments")
    # The vendor the thread was with when this was written: its engineers see it, with the team. None before
    # the question is put to anyone: the team's alone.
    organisation = models.ForeignKey(
        Organisation, null=True, blank=True, on_delete=models.PROTECT, related_name="comments"
    )
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="comments")
    body = models.TextField()
    # Rendered and sanitised when written (vendor.rich_text), so pages never render Markdown.
    body_html = models.TextField()
    artifacts = models.ManyToManyField(Artifact, blank=True, related_name="comments")
    mentions = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="mentioned_in_comments")
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    edited_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(revision__gte=1), name="comment_revision_positive"),
            models.CheckConstraint(
                condition=Q(revision=1, edited_at__isnull=True) | Q(revision__gt=1, edited_at__isnull=False),
                name="comment_edited_has_time",
            ),
        ]

    def __str__(self):
        return f"{self.question.code} comment {self.pk}"


class CommentRevision(models.Model):
    """A comment's text and attachments as one edit left them; revision 1 is the text as first written."""

    comment = models.ForeignKey(Comment, on_delete=models.PROTECT, related_name="revisions")
    revision = models.PositiveIntegerField()
    body = models.TextField()
    artifact_ids = models.JSONField(default=list, blank=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["comment_id", "revision"]
        constraints = [
            models.UniqueConstraint(fields=["comment", "revision"], name="comment_revision_unique"),
        ]

    def __str__(self):
        return f"comment {self.comment_id} r{self.revision}"


class NotificationPreference(models.Model):
    """What one person is told, and in which language. Without a row: every kind, in the default language."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    muted = models.JSONField(default=list, blank=True)  # event kinds (vendor.events) not to be told of
    language = models.CharField(max_length=10, choices=settings.LANGUAGES, default=settings.LANGUAGE_CODE)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"preferences of {self.user}"


class NotificationEvent(models.Model):
    """Something people may be told of, stored once whoever receives it. `key`, when set, makes sure the same
    event (a due date passing) is never told twice."""

    kind = models.CharField(max_length=40, choices=events.CHOICES)
    key = models.CharField(max_length=200, blank=True)
    question = models.ForeignKey(
        Question, null=True, blank=True, on_delete=models.PROTECT, related_name="notification_events"
    )
    # The vendor whose work it is about; None for the team's own decisions (promotions), which no vendor is told.
    organisation = models.ForeignKey(
        Organisation, null=True, blank=True, on_delete=models.PROTECT, related_name="notification_events"
    )
    actor_label = models.CharField(max_length=150)
    data = models.JSONField(default=dict, blank=True)  # what the subject and body say, and the page's path
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["key"], condition=~Q(key=""), name="notification_event_key_unique"),
        ]

    def __str__(self):
        return f"{self.kind} {self.pk}"


class Notification(models.Model):
    """An event for one person: listed on their notifications page, and e-mailed when they have an address."""

    event = models.ForeignKey(NotificationEvent, on_delete=models.CASCADE, related_name="notifications")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    email = models.EmailField(blank=True)  # the address it goes to, as it was when the event happened
    emailed_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["event", "user"], name="notification_once_per_user"),
        ]

    def __str__(self):
        return f"{self.event} for {self.user}"


class Webhook(models.Model):
    """An outgoing webhook: events POSTed as JSON to `url`, signed with the hook's own secret. A hook of the
    integration team receives every event it subscribes to; a vendor's hook only those about that vendor."""

    organisation = models.ForeignKey(Organisation, on_delete=models.PROTECT, related_name="webhooks")
    name = models.CharField(max_length=100)
    url = models.CharField(max_length=500)  # http(s), checked by vendor.services.webhooks
    secret = models.CharField(max_length=64)  # HMAC-SHA256 key of the X-Calculet-Signature header
    events = models.JSONField(default=list, blank=True)  # event kinds it receives; empty: all
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self):
        return self.name


class WebhookDelivery(models.Model):
    """One event sent to one hook: the exact body signed, and every attempt to deliver it."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
    STATES = [
        (PENDING, pgettext_lazy("delivery state", "Pending")),
        (DELIVERED, pgettext_lazy("delivery state", "Delivered")),
        (FAILED, pgettext_lazy("delivery state", "Failed")),
    ]

    hook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(NotificationEvent, on_delete=models.CASCADE, related_name="deliveries")
    body = models.TextField()
    state = models.CharField(max_length=20, choices=STATES, default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # One entry per attempt: {"at", "status" (HTTP status or null), "error", "ms"}.
    log = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["hook", "event"], name="webhook_delivery_once"),
            models.CheckConstraint(
                condition=Q(state__in=["pending", "delivered", "failed"]), name="webhook_delivery_state_valid"
            ),
        ]

    def __str__(self):
        return f"{self.event.kind} to {self.hook}"
