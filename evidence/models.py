from django.db import models
from django.db.models import Q

from evidence.grades import GRADE_CHOICES, GRADES, STATUS_CHOICES, STATUSES


class ChecklistDocument(models.Model):
    """The imported source document: one row, updated by each import."""

    title = models.CharField(max_length=300)
    date = models.CharField(max_length=40)
    source_sha256 = models.CharField(max_length=64)
    closing_rule = models.TextField()
    acceptance_chain = models.TextField()
    imported_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return self.title


class PathAlias(models.Model):
    name = models.CharField(max_length=40, unique=True)
    path = models.CharField(max_length=500)
    expanded_path = models.CharField(max_length=1000)
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [
            models.CheckConstraint(condition=Q(name__regex=r"^\$[A-Z][A-Z0-9_]*$"), name="alias_name_format")
        ]

    def __str__(self):
        return self.name


class Archive(models.Model):
    name = models.CharField(max_length=300, unique=True)
    sha256 = models.CharField(max_length=64)
    description = models.CharField(max_length=300)
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [models.CheckConstraint(condition=Q(sha256__regex=r"^[0-9a-f]{64}$"), name="archive_sha256_hex")]

    def __str__(self):
        return self.name


class EvidenceTable(models.Model):
    """One of the evidence tables of sections 4–11, named by the letter its codes start with."""

    prefix = models.CharField(max_length=2, unique=True)
    section = models.PositiveSmallIntegerField(unique=True)
    title = models.CharField(max_length=200)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["section"]
        constraints = [
            models.CheckConstraint(condition=Q(prefix__regex=r"^[A-Z]$"), name="evidence_table_prefix_letter")
        ]

    def __str__(self):
        return f"{self.section}. {self.title}"


class EvidenceItem(models.Model):
    SEED = "seed"
    RUN = "run"
    CHECK = "check"
    REVIEW = "review"
    ORIGINS = [
        (SEED, "Source document"),
        (RUN, "Acceptance run"),
        (CHECK, "Static check of delivered artifacts"),
        (REVIEW, "Document review"),
    ]

    code = models.CharField(max_length=40, unique=True)
    table = models.ForeignKey(EvidenceTable, null=True, blank=True, on_delete=models.PROTECT, related_name="items")
    position = models.PositiveIntegerField(default=0)
    origin = models.CharField(max_length=10, choices=ORIGINS, default=SEED)
    conclusion = models.TextField()
    source_text = models.TextField(blank=True)
    # The grade/status cell exactly as written; the parsed values live in EvidenceGrade/EvidenceStatus.
    grade_text = models.CharField(max_length=200, blank=True)
    explanation = models.TextField(blank=True)
    # What a static check found and looked at, whole (findings, files, output tails): valid JSON however long.
    detail = models.JSONField(default=dict, blank=True)
    defect = models.BooleanField(default=False)
    limitation = models.BooleanField(default=False)
    # Whose delivery it is about; None for the seed's items, which everyone reads.
    organisation = models.ForeignKey(
        "vendor.Organisation", null=True, blank=True, on_delete=models.PROTECT, related_name="evidence_items"
    )
    # The versions it was measured or checked on: calrt, driver, firmware, chip, where known.
    versions = models.JSONField(default=dict, blank=True)
    deliverable = models.ForeignKey(
        "vendor.Deliverable", null=True, blank=True, on_delete=models.PROTECT, related_name="evidence_items"
    )
    # The answer a static check examined: what tells that answer's check has been done.
    answer = models.ForeignKey(
        "vendor.Answer", null=True, blank=True, on_delete=models.PROTECT, related_name="evidence_items"
    )
    # False once its versions are no longer the target's: it then counts as E3 (to be checked again).
    current = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["table__section", "position", "code"]
        constraints = [
            models.CheckConstraint(
                condition=Q(origin__in=["seed", "run", "check", "review"]), name="evidence_origin_valid"
            ),
            models.CheckConstraint(
                condition=~Q(origin="seed") | Q(table__isnull=False), name="evidence_seed_item_has_table"
            ),
            models.CheckConstraint(
                condition=~Q(origin="seed") | Q(code__regex=r"^[A-Z][0-9]{2}$"), name="evidence_seed_code_format"
            ),
        ]

    def __str__(self):
        return self.code


class EvidenceGrade(models.Model):
    item = models.ForeignKey(EvidenceItem, on_delete=models.CASCADE, related_name="grades")
    grade = models.CharField(max_length=2, choices=GRADE_CHOICES)

    class Meta:
        ordering = ["grade"]
        constraints = [
            models.UniqueConstraint(fields=["item", "grade"], name="evidence_grade_unique"),
            models.CheckConstraint(condition=Q(grade__in=GRADES), name="evidence_grade_valid"),
        ]

    def __str__(self):
        return self.grade


class EvidenceStatus(models.Model):
    """A capability status an evidence row names, with what it applies to (e.g. C4 for arbitrary registers)."""

    item = models.ForeignKey(EvidenceItem, on_delete=models.CASCADE, related_name="statuses")
    status = models.CharField(max_length=2, choices=STATUS_CHOICES)
    qualifier = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["status", "qualifier"]
        constraints = [
            models.UniqueConstraint(fields=["item", "status", "qualifier"], name="evidence_status_unique"),
            models.CheckConstraint(condition=Q(status__in=STATUSES), name="evidence_status_valid"),
        ]

    def __str__(self):
        return f"{self.status} {self.qualifier}".strip()


class SourceReference(models.Model):
    item = models.ForeignKey(EvidenceItem, on_delete=models.CASCADE, related_name="sources")
    position = models.PositiveSmallIntegerField()
    raw = models.CharField(max_length=500)
    alias = models.ForeignKey(PathAlias, null=True, blank=True, on_delete=models.PROTECT, related_name="references")
    path = models.CharField(max_length=500, blank=True)
    # Lines as written (":820-851", ":230,475") and parsed into [[first, last], ...].
    lines = models.CharField(max_length=100, blank=True)
    line_ranges = models.JSONField(default=list, blank=True)
    same_file = models.BooleanField(default=False)

    class Meta:
        ordering = ["item", "position"]
        constraints = [
            models.UniqueConstraint(fields=["item", "position"], name="source_reference_position_unique"),
            # "同文件" resolves to a file: a same-file reference always names one.
            models.CheckConstraint(
                condition=Q(same_file=False) | Q(alias__isnull=False) | ~Q(path=""), name="source_same_file_has_file"
            ),
        ]

    def __str__(self):
        return self.raw


class CapabilityQuerySet(models.QuerySet):
    def update(self, **kwargs):
        from evidence.status_guard import check_status_write

        if "status" in kwargs:
            check_status_write()
        return super().update(**kwargs)

    def bulk_update(self, objs, fields, batch_size=None):
        from evidence.status_guard import check_status_write

        if "status" in fields:
            check_status_write()
        return super().bulk_update(objs, fields, batch_size=batch_size)

    def bulk_create(self, objs, *args, update_conflicts=False, update_fields=None, **kwargs):
        from evidence.status_guard import check_status_write

        if update_conflicts and "status" in (update_fields or []):
            check_status_write()
        return super().bulk_create(
            objs, *args, update_conflicts=update_conflicts, update_fields=update_fields, **kwargs
        )


class Capability(models.Model):
    """A capability whose C status only the promotion gate may change."""

    slug = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=300)
    description = models.TextField(blank=True)
    status = models.CharField(max_length=2, choices=STATUS_CHOICES)
    pinned = models.BooleanField(default=False)
    pinned_status = models.CharField(max_length=2, choices=STATUS_CHOICES, blank=True)
    scope = models.CharField(max_length=200, blank=True)
    evidence = models.ManyToManyField(EvidenceItem, blank=True, related_name="capabilities")
    questions = models.ManyToManyField("vendor.Question", blank=True, related_name="capabilities")
    # The deliverables (calbin, sdk) whose acceptance proves this capability.
    deliverables = models.ManyToManyField("vendor.Deliverable", blank=True, related_name="capabilities")
    position = models.PositiveIntegerField(default=0)
    status_changed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = CapabilityQuerySet.as_manager()

    class Meta:
        ordering = ["position", "slug"]
        verbose_name_plural = "capabilities"
        # Related-object access and Django internals use the base manager: it must carry the guard too.
        base_manager_name = "objects"
        constraints = [
            models.CheckConstraint(condition=Q(status__in=STATUSES), name="capability_status_valid"),
            models.CheckConstraint(
                condition=Q(pinned=False, pinned_status="") | Q(pinned=True, pinned_status__in=["C3", "C4"]),
                name="capability_pinned_status_valid",
            ),
        ]

    def __str__(self):
        return self.title

    @classmethod
    def from_db(cls, db, field_names, values):
        instance = super().from_db(db, field_names, values)
        instance._stored_status = instance.__dict__.get("status")
        return instance

    def save(self, *args, **kwargs):
        from evidence.status_guard import check_status_write

        stored = getattr(self, "_stored_status", None)
        if self.pk is not None and stored is not None and self.status != stored:
            check_status_write()
        super().save(*args, **kwargs)
        self._stored_status = self.status
