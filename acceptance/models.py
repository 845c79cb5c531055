from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from acceptance import stages


class Target(models.Model):
    """Where runs execute: the bundled simulator, or a host with a board. Each has a Celery queue of its own."""

    SIMULATOR = "simulator"
    HARDWARE = "hardware"
    KINDS = [(SIMULATOR, _("Simulator")), (HARDWARE, _("Hardware"))]

    OK = "ok"
    DEGRADED = "degraded"
    OFFLINE = "offline"
    HEALTH_STATES = [(OK, _("OK")), (DEGRADED, _("Degraded")), (OFFLINE, _("Offline"))]

    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=KINDS)
    queue = models.CharField(max_length=100, unique=True)
    calrt_version = models.CharField(max_length=50)
    driver_version = models.CharField(max_length=50)
    firmware_version = models.CharField(max_length=50)
    chip = models.CharField(max_length=100)
    # The command that drives the board on its host (docs/runner-protocol.md). A hardware target is registered
    # with one, and without it its runs end in error: it never falls back to the bundled simulator. Not a
    # database constraint, so targets registered before this rule can still be loaded and fixed.
    runner_command = models.CharField(max_length=1000, blank=True)
    # The SHA-256 of the runner's executable as the agent on the board's host read it; "" until one said.
    runner_digest = models.CharField(max_length=64, blank=True)
    # What an agent registered that a PM or operator has not approved yet, or {} when nothing waits:
    # {"agent", "host", "first", "changes": {field: [registered, sent]}, "reason"}. The target's fields keep
    # the approved values meanwhile, and none of its runs is claimed (docs/deploy.md, "What the host says").
    registration_pending = models.JSONField(default=dict, blank=True)
    # When an agent's registration of the target was last approved; None: never (a board's first needs one).
    registration_approved_at = models.DateTimeField(null=True, blank=True)
    health = models.CharField(max_length=20, choices=HEALTH_STATES, default=OFFLINE)
    health_reason = models.CharField(max_length=500, blank=True)
    maintenance = models.BooleanField(default=False)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_worker = models.CharField(max_length=200, blank=True)
    last_health_check_at = models.DateTimeField(null=True, blank=True)
    # None until the first health job has finished; False stops the target from receiving runs.
    last_health_check_passed = models.BooleanField(null=True, blank=True)
    last_health_run = models.ForeignKey("Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Why the last health check failed (its run's reason), shown while the target is out of rotation.
    last_health_check_reason = models.CharField(max_length=400, blank=True)
    # A health check is due after this many runner-stage runs, or this many hours, since the last one;
    # None: ACCEPTANCE_HEALTH_CHECK_EVERY_RUNS / ACCEPTANCE_HEALTH_CHECK_EVERY_HOURS.
    health_check_every_runs = models.PositiveIntegerField(null=True, blank=True)
    health_check_every_hours = models.PositiveIntegerField(null=True, blank=True)
    # Its runner stages are pulled over the API by calculet-agent on the target's host (docs/deploy.md) rather
    # than sent to its Celery queue: while it has a live token (set by the first, cleared with the last revoked).
    pulled = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["kind", "slug"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=["simulator", "hardware"]), name="target_kind_valid"),
            models.CheckConstraint(condition=Q(health__in=["ok", "degraded", "offline"]), name="target_health_valid"),
            models.CheckConstraint(condition=~Q(queue__in=["", "default"]), name="target_queue_own"),
            models.CheckConstraint(
                condition=Q(health_check_every_runs__isnull=True) | Q(health_check_every_runs__gte=1),
                name="target_health_check_runs_positive",
            ),
            models.CheckConstraint(
                condition=Q(health_check_every_hours__isnull=True) | Q(health_check_every_hours__gte=1),
                name="target_health_check_hours_positive",
            ),
        ]

    def __str__(self):
        return self.name

    def registered_versions(self) -> dict:
        """The CalRT, driver, firmware and chip the target is registered with (the job's and result's keys)."""
        return {
            "calrt": self.calrt_version,
            "driver": self.driver_version,
            "firmware": self.firmware_version,
            "chip": self.chip,
        }

    def as_job_target(self) -> dict:
        return {"name": self.slug, "kind": self.kind, **self.registered_versions()}


class TargetToken(models.Model):
    """The key a target's agent holds: it registers the agent and claims that target's runs, nothing else.
    Stored only as a SHA-256; revoked, it stops the agent and every run token it was used to claim."""

    target = models.ForeignKey(Target, on_delete=models.PROTECT, related_name="tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12)
    key_hash = models.CharField(max_length=64, unique=True)
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.target.slug}: {self.name} ({self.prefix}…)"


class TargetAgent(models.Model):
    """One calculet-agent process's host, as it registered: the key pair it made at its first start is its
    identity (a new state directory is a new agent), and every result it posts is signed with that key."""

    target = models.ForeignKey(Target, on_delete=models.PROTECT, related_name="agents")
    public_key = models.CharField(max_length=64, unique=True, help_text="Ed25519, base64 of the 32 raw bytes.")
    host = models.CharField(max_length=200)
    agent_version = models.CharField(max_length=50)
    platform = models.CharField(max_length=200, blank=True)
    registered_at = models.DateTimeField(auto_now_add=True)
    last_poll_at = models.DateTimeField(null=True, blank=True)
    current_run = models.ForeignKey("Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    cache_bytes = models.BigIntegerField(default=0)

    def __str__(self):
        return f"{self.host} for {self.target.slug}"


class AnswerClaim(models.Model):
    """The capability an answer claims to prove, when it names one: what its chains may move."""

    answer = models.OneToOneField("vendor.Answer", primary_key=True, on_delete=models.PROTECT, related_name="claim")
    capability = models.ForeignKey("evidence.Capability", on_delete=models.PROTECT, related_name="claims")

    def __str__(self):
        return f"{self.answer} claims {self.capability.slug}"


class Chain(models.Model):
    """The acceptance chain of one question and the capability it may move, on one target.

    `answer` is the answer whose artifact versions the chain currently checks: a newer complete answer
    takes its place, and the stages whose inputs changed become stale. `stage_digests` holds, per stage,
    the digest of the inputs it must run on now; a run counts for its stage only on those inputs.
    The chain's state is derived from its runs (`acceptance.selectors.chain_stages`).
    """

    question = models.ForeignKey("vendor.Question", on_delete=models.PROTECT, related_name="chains")
    capability = models.ForeignKey(
        "evidence.Capability", null=True, blank=True, on_delete=models.PROTECT, related_name="chains"
    )
    answer = models.ForeignKey("vendor.Answer", on_delete=models.PROTECT, related_name="chains")
    target = models.ForeignKey(Target, on_delete=models.PROTECT, related_name="chains")
    stage_digests = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            # Two partial constraints rather than nulls_distinct=False, which SQLite cannot enforce.
            models.UniqueConstraint(
                fields=["question", "capability", "target"],
                condition=Q(capability__isnull=False),
                name="chain_unique_per_capability_target",
            ),
            models.UniqueConstraint(
                fields=["question", "target"],
                condition=Q(capability__isnull=True),
                name="chain_unique_per_target_without_capability",
            ),
        ]

    def __str__(self):
        return f"{self.question} chain on {self.target.slug}"


class Run(models.Model):
    """One execution of one stage on one target. PostgreSQL is its source of truth, not the broker.

    Written `queued` before its task is sent. A worker claims it by moving it to `running` and raising
    `attempt`, under `select_for_update`; it then renews `lease_expires_at` while the runner works. The
    sweeper re-sends runs left queued and runs whose lease expired, and ends a run as an infrastructure
    error after the last attempt. Only the holder of the current attempt may write the verdict.
    """

    STAGES = list(stages.STAGE_LABELS.items())
    STATES = list(stages.STATE_LABELS.items())
    VERDICTS = [(verdict, verdict.capitalize()) for verdict in stages.VERDICTS]

    chain = models.ForeignKey(Chain, null=True, blank=True, on_delete=models.PROTECT, related_name="runs")
    stage = models.CharField(max_length=20, choices=STAGES)
    target = models.ForeignKey(Target, on_delete=models.PROTECT, related_name="runs")
    answer = models.ForeignKey("vendor.Answer", null=True, blank=True, on_delete=models.PROTECT, related_name="runs")
    state = models.CharField(max_length=20, choices=STATES, default=stages.QUEUED)
    attempt = models.PositiveSmallIntegerField(default=0)
    # Lowest first among the target's waiting runs (stages.PRIORITY_*), then the oldest.
    priority = models.PositiveSmallIntegerField(default=stages.PRIORITY_BACKLOG)
    # 0, or which automatic retry of an infrastructure error this run is (its `rerun_of` is the run that erred).
    retry = models.PositiveSmallIntegerField(default=0)
    inputs_digest = models.CharField(max_length=64)
    # The job's parameters and the artifact versions and target versions the run was made for.
    params = models.JSONField(default=dict, blank=True)
    # The capability's recipe probes the job sends (`{"name", "params"}`, thresholds among the params) and the
    # recipe's version; empty for a health job or a chain without a capability.
    probes = models.JSONField(default=list, blank=True)
    recipe_version = models.PositiveIntegerField(null=True, blank=True)
    inputs = models.JSONField(default=dict, blank=True)
    artifacts = models.ManyToManyField("vendor.Artifact", blank=True, related_name="runs")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="requested_runs"
    )
    rerun_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # Since when it has waited to be claimed: set as it becomes queued or pending from anything else (sent back
    # after a lost attempt: since that attempt's lease lapsed), never by a re-send of its message or a move
    # between queued and pending. The time split's queue wait and the queue timeout both count from it.
    waiting_since = models.DateTimeField(null=True, blank=True)
    send_count = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    # The last attempt's time split, in seconds: `queue_wait`, `fetch`, `runner`, `example`, `post`
    # (docs/performance.md, "A run's time split").
    timing = models.JSONField(default=dict, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    progress = models.FloatField(default=0)
    progress_text = models.CharField(max_length=200, blank=True)
    # The first RUN_LOG_MAX_BYTES of the output, and always its last few KiB in `log_tail`.
    log = models.TextField(blank=True)
    log_tail = models.TextField(blank=True)
    log_bytes = models.PositiveBigIntegerField(default=0)
    verdict = models.CharField(max_length=10, choices=VERDICTS, blank=True)
    reason = models.TextField(blank=True)
    findings = models.JSONField(default=list, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    evidence = models.OneToOneField(
        "evidence.EvidenceItem", null=True, blank=True, on_delete=models.SET_NULL, related_name="run"
    )

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["chain", "stage", "-id"], name="run_chain_stage_latest"),
            models.Index(fields=["state"], name="run_state"),
            models.Index(fields=["target", "state", "priority", "id"], name="run_target_waiting"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(stage__in=stages.RUN_STAGES), name="run_stage_valid"),
            models.CheckConstraint(condition=Q(state__in=stages.STATES), name="run_state_valid"),
            models.CheckConstraint(condition=Q(progress__gte=0, progress__lte=100), name="run_progress_range"),
            models.CheckConstraint(
                condition=Q(verdict="", state__in=[*stages.ACTIVE_STATES, stages.STALE])
                | Q(verdict=stages.PASS, state=stages.PASSED)
                | Q(verdict=stages.FAIL, state=stages.FAILED)
                | Q(verdict=stages.ERROR, state=stages.ERROR),
                name="run_verdict_matches_state",
            ),
            models.CheckConstraint(
                condition=Q(chain__isnull=False) | Q(stage=stages.HEALTH), name="run_chain_unless_health"
            ),
        ]

    def __str__(self):
        return f"run {self.pk} {self.stage} on {self.target_id}"


class RunResult(models.Model):
    """The verdict one attempt of a run reached. At most one per (run, attempt); the claim protocol lets
    only the current attempt write one, so a run has exactly one once it has finished."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="results")
    attempt = models.PositiveSmallIntegerField()
    verdict = models.CharField(max_length=10, choices=Run.VERDICTS)
    worker = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "attempt"], name="run_result_unique_per_attempt"),
        ]


class RunToken(models.Model):
    """The key of one claimed attempt of a run, given to the agent that claimed it (stored only as a
    SHA-256). It works while the run is `running` with that attempt under a live lease and the target token
    that claimed it is not revoked; after the verdict it only reads back that verdict (a result sent twice)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tokens")
    attempt = models.PositiveSmallIntegerField()
    agent = models.ForeignKey(TargetAgent, on_delete=models.PROTECT, related_name="run_tokens")
    target_token = models.ForeignKey(TargetToken, on_delete=models.PROTECT, related_name="run_tokens")
    key_hash = models.CharField(max_length=64, unique=True)
    # Output chunks are numbered by the agent from 0; one already written is not written again.
    next_chunk = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "attempt"], name="run_token_one_per_attempt")]

    def __str__(self):
        return f"run {self.run_id} attempt {self.attempt}"


class PromotionAttempt(models.Model):
    """One request to move a capability's status, allowed or blocked, with what the gate relied on."""

    capability = models.ForeignKey("evidence.Capability", on_delete=models.PROTECT, related_name="promotion_attempts")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="promotion_attempts"
    )
    actor_label = models.CharField(max_length=150)
    from_status = models.CharField(max_length=2)
    to_status = models.CharField(max_length=2)
    allowed = models.BooleanField()
    reason = models.TextField(blank=True)
    reasons = models.JSONField(default=list, blank=True)
    policy_version = models.CharField(max_length=100)
    answer = models.ForeignKey(
        "vendor.Answer", null=True, blank=True, on_delete=models.SET_NULL, related_name="promotion_attempts"
    )
    runs = models.ManyToManyField(Run, blank=True, related_name="promotion_attempts")
    # The CalRT/driver/firmware/chip versions of the evidence the new status rests on.
    versions = models.JSONField(default=dict, blank=True)
    artifacts = models.ManyToManyField("vendor.Artifact", blank=True, related_name="promotion_attempts")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["allowed", "created_at"], name="promotion_allowed_created")]
        constraints = [
            models.CheckConstraint(condition=Q(allowed=True) | ~Q(reasons=[]), name="promotion_blocked_has_reasons"),
        ]

    def __str__(self):
        outcome = "promoted" if self.allowed else "blocked"
        return f"{self.capability} {self.from_status}->{self.to_status} {outcome}"


class CapabilityApproval(models.Model):
    """A member of the integration team's approval of one move of a capability whose moves need two
    (acceptance.policy.approval_required), bound to the evidence the move rested on when it was given: the
    answer and runs (none for a pinned capability's move to or back from C4). Revoked, never deleted, when the
    capability moves or that evidence lapses."""

    capability = models.ForeignKey("evidence.Capability", on_delete=models.PROTECT, related_name="approvals")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    from_status = models.CharField(max_length=2)
    to_status = models.CharField(max_length=2)
    answer = models.ForeignKey("vendor.Answer", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    runs = models.ManyToManyField(Run, blank=True, related_name="approvals")
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["capability", "approver", "from_status", "to_status"],
                condition=Q(revoked_at__isnull=True),
                name="approval_one_standing_per_member_and_move",
            ),
            models.CheckConstraint(
                condition=Q(revoked_at__isnull=True, revoked_reason="")
                | Q(revoked_at__isnull=False) & ~Q(revoked_reason=""),
                name="approval_revoked_has_reason",
            ),
        ]

    def __str__(self):
        return f"{self.capability} {self.from_status}->{self.to_status} approved by {self.approver}"
