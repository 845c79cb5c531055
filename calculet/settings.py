"""Settings for calculet, read from the environment (see the settings table in README.md).

With nothing set, calculet runs on an SQLite file under ./data with an embedded Celery broker beside it (the
laptop default: `scripts/dev.py run` starts the workers). Production sets DATABASE_URL (PostgreSQL), REDIS_URL
and SECRET_KEY.
"""

import ipaddress
from pathlib import Path

import environ
from celery.schedules import crontab
from corsheaders.defaults import default_headers as cors_default_headers
from corsheaders.defaults import default_methods as cors_default_methods

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")

DEBUG = env.bool("DEBUG", default=False)
if DEBUG:
    SECRET_KEY = env.str("SECRET_KEY", default="insecure-development-key-never-use-in-production")
else:
    SECRET_KEY = env.str("SECRET_KEY")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

DATA_DIR = Path(env.str("CALCULET_DATA_DIR", default=str(BASE_DIR / "data")))
DATA_DIR.mkdir(parents=True, exist_ok=True)  # the embedded SQLite default cannot create its folder

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "corsheaders",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "vendor",
    "evidence",
    "acceptance",
    "calculet",
]

MIDDLEWARE = [
    "calculet.logs.RequestIdMiddleware",
    "corsheaders.middleware.CorsMiddleware",
    "calculet.health.ServiceUnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "calculet.urls"
WSGI_APPLICATION = "calculet.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "vendor.context_processors.membership",
            ],
            "libraries": {"web": "calculet.web_tags"},
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'calculet.sqlite3'}"),
}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded default has the web server, the workers and `seed_demo` writing at once. A transaction that
    # read first and then writes cannot wait for another writer (SQLite answers "database is locked" at once),
    # so every transaction takes the write lock when it begins, waiting up to 20 s for it.
    DATABASES["default"].setdefault("OPTIONS", {}).update({"transaction_mode": "IMMEDIATE", "timeout": 20})
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The cache holds the API's per-token request counts and the busiest pages' rendered parts (calculet.pagecache).
# Each gunicorn worker counts and keeps parts alone in the default in-process cache; a shared Redis cache (a
# database index of its own, not the broker's) counts them together and renders each part once for all.
CACHES = {"default": env.cache("CACHE_URL", default="locmemcache://")}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(DATA_DIR / "static")))

# Artifact bytes: the filesystem under STORAGE_ROOT by default, an S3-compatible store when
# STORAGE_BACKEND=s3 (django-storages reads its AWS_* settings from the environment).
STORAGE_ROOT = Path(env.str("STORAGE_ROOT", default=str(DATA_DIR / "storage")))
STORAGE_BACKEND = env.str("STORAGE_BACKEND", default="filesystem")
if STORAGE_BACKEND == "s3":
    ARTIFACT_STORAGE = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": env.str("AWS_STORAGE_BUCKET_NAME"),
            "endpoint_url": env.str("AWS_S3_ENDPOINT_URL", default=None),
        },
    }
else:
    ARTIFACT_STORAGE = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(STORAGE_ROOT / "artifacts")},
    }
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "artifacts": ARTIFACT_STORAGE,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
UPLOAD_TEMP_DIR = Path(env.str("UPLOAD_TEMP_DIR", default=str(STORAGE_ROOT / "uploads")))
# Where Django spools a multipart file before the view reads it: the uploads' volume, not the system's /tmp, so
# that a plain upload needs room only where /readyz looks and a full disk is one answer (507) for both ways.
FILE_UPLOAD_TEMP_DIR = Path(env.str("FILE_UPLOAD_TEMP_DIR", default=str(UPLOAD_TEMP_DIR)))
FILE_UPLOAD_TEMP_DIR.mkdir(parents=True, exist_ok=True)
FILE_UPLOAD_HANDLERS = ["django.core.files.uploadhandler.MemoryFileUploadHandler", "vendor.storage.SpoolUploadHandler"]
UPLOAD_MAX_BYTES = env.int("UPLOAD_MAX_BYTES", default=20 * 1024**3)
UPLOAD_PLAIN_MAX_BYTES = env.int("UPLOAD_PLAIN_MAX_BYTES", default=64 * 1024**2)
UPLOAD_EXPIRY_HOURS = env.int("UPLOAD_EXPIRY_HOURS", default=24)
STORAGE_MIN_FREE_BYTES = env.int("STORAGE_MIN_FREE_BYTES", default=1024**3)
ARCHIVE_MAX_MEMBERS = env.int("ARCHIVE_MAX_MEMBERS", default=10_000)
ARCHIVE_MAX_UNPACKED_BYTES = env.int("ARCHIVE_MAX_UNPACKED_BYTES", default=64 * 1024**3)
ARCHIVE_MAX_RATIO = env.int("ARCHIVE_MAX_RATIO", default=100)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "vendor.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": [
        "calculet.query.StrictFilterBackend",
        "calculet.query.StrictOrderingFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "calculet.query.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "calculet.api.exception_handler",
    "DEFAULT_PARSER_CLASSES": ["calculet.parsers.JsonParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "DEFAULT_THROTTLE_CLASSES": ["vendor.authentication.TokenRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "token": env.str("API_THROTTLE_RATE", default="600/min"),
        "auth_failure": env.str("API_AUTH_FAILURE_RATE", default="20/min"),
    },
}
# Browsers on these origins may call the API (a tus client in another site's page among them): the token goes
# in the Authorization header, never a cookie, so no credentials are allowed.
CORS_ALLOWED_ORIGINS = env.list("CORS_ALLOWED_ORIGINS", default=[])
CORS_URLS_REGEX = r"^/api/"
CORS_ALLOW_METHODS = (*cors_default_methods, "HEAD")
CORS_ALLOW_HEADERS = (
    *cors_default_headers,
    "tus-resumable",
    "upload-length",
    "upload-offset",
    "upload-metadata",
    "upload-checksum",
    "upload-defer-length",
    "x-http-method-override",
    "x-request-id",
)
CORS_EXPOSE_HEADERS = [
    "Location",
    "Tus-Resumable",
    "Tus-Version",
    "Tus-Extension",
    "Tus-Max-Size",
    "Tus-Checksum-Algorithm",
    "Upload-Offset",
    "Upload-Length",
    "Upload-Metadata",
    "Upload-Expires",
    "Upload-Artifact",
    "X-Request-ID",
]

SPECTACULAR_SETTINGS = {
    "TITLE": "calculet API",
    "DESCRIPTION": "Vendor answers, artifacts, acceptance runs and the promotion gate.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "vendor.api.uploads.tus_schema"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "ArtifactKindEnum": "vendor.models.Artifact.KINDS",
        "ArtifactStateEnum": "vendor.models.Artifact.STATES",
        "OrganisationKindEnum": "vendor.models.Organisation.KINDS",
        "QuestionStateEnum": "vendor.states.QUESTION_STATES",
        "CapabilityStatusEnum": "evidence.grades.STATUS_CHOICES",
        "RunStateEnum": "acceptance.models.Run.STATES",
        "EventKindEnum": "vendor.events.CHOICES",
        "ChoosableEventKindEnum": "vendor.events.CHOOSABLE",
        "DeliverableKindEnum": "vendor.models.Deliverable.KINDS",
        "DeliverableStateEnum": "vendor.models.Deliverable.STATES",
    },
}

# Celery: tasks always run in a worker, never inside a request. The broker is Redis when REDIS_URL is set;
# otherwise an embedded one, message files under DATA_DIR/broker (kombu's filesystem transport), which serves
# the web server and the workers of one machine (`scripts/dev.py run` starts them). The visibility time-out
# must exceed the longest run: Redis only re-delivers an unacknowledged message after it.
REDIS_URL = env.str("REDIS_URL", default="")
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=7200)}
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    # Redis keeps a list per priority step and serves the lowest number first: a run sent again after its
    # worker was lost goes ahead of its target's backlog (acceptance/services/dispatch.py).
    CELERY_BROKER_TRANSPORT_OPTIONS |= {"queue_order_strategy": "priority", "priority_steps": [0, 3, 6, 9], "sep": ":"}
else:
    BROKER_DIR = DATA_DIR / "broker"
    (BROKER_DIR / "messages").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://localhost/"  # the host only quiets kombu's "no hostname" warning
    CELERY_BROKER_TRANSPORT_OPTIONS |= {
        "data_folder_in": str(BROKER_DIR / "messages"),
        "data_folder_out": str(BROKER_DIR / "messages"),
        "control_folder": str(BROKER_DIR / "control"),
    }
    CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=3600)
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=3900)
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# A question is "due soon" from this many days before its due date (the question list, the dashboard, the daily
# notifications).
QUESTION_DUE_SOON_DAYS = env.int("QUESTION_DUE_SOON_DAYS", default=7)

# Notifications (docs/pm-guide.md, "Notifications"): e-mail through Django's mail framework, printed to the
# console unless EMAIL_URL names a server (smtp://user:password@host:587, smtp+tls://…); links in e-mails and
# webhook bodies start with CALCULET_BASE_URL. Webhook deliveries are tried WEBHOOK_MAX_ATTEMPTS times, waiting
# WEBHOOK_RETRY_SECONDS, then twice as long before each further attempt.
EMAIL_CONFIG = env.email_url("EMAIL_URL", default="consolemail://")
vars().update(EMAIL_CONFIG)  # EMAIL_BACKEND, EMAIL_HOST, EMAIL_PORT, … as the URL gives them
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="calculet <calculet@localhost>")
CALCULET_BASE_URL = env.str("CALCULET_BASE_URL", default="http://127.0.0.1:8000")
WEBHOOK_TIMEOUT_SECONDS = env.int("WEBHOOK_TIMEOUT_SECONDS", default=10)
# Webhooks go to public addresses only, checked when a hook is made and again after DNS at each delivery;
# true lets them reach loopback, link-local and private networks (a receiver on the same host or LAN).
WEBHOOK_ALLOW_PRIVATE_ADDRESSES = env.bool("WEBHOOK_ALLOW_PRIVATE_ADDRESSES", default=False)
WEBHOOK_MAX_ATTEMPTS = env.int("WEBHOOK_MAX_ATTEMPTS", default=6)
WEBHOOK_RETRY_SECONDS = env.int("WEBHOOK_RETRY_SECONDS", default=30)

# Acceptance runs (docs/acceptance.md). A worker renews a run's lease every ACCEPTANCE_RUN_HEARTBEAT_SECONDS;
# the sweeper (beat, every ACCEPTANCE_SWEEP_INTERVAL) re-sends runs whose lease expired, so a killed worker's
# run restarts within lease + sweep interval. Runner limits apply to each runner subprocess.
ACCEPTANCE_RUNNER_COMMAND = env.str("ACCEPTANCE_RUNNER_COMMAND", default="")
# Device nodes a hardware runner needs (the board's /dev entries), bound into its sandbox.
ACCEPTANCE_RUNNER_DEVICES = env.list("ACCEPTANCE_RUNNER_DEVICES", default=[])
ACCEPTANCE_RUN_LEASE_SECONDS = env.int("ACCEPTANCE_RUN_LEASE_SECONDS", default=15)
ACCEPTANCE_RUN_HEARTBEAT_SECONDS = env.float("ACCEPTANCE_RUN_HEARTBEAT_SECONDS", default=2.0)
ACCEPTANCE_RUN_MAX_ATTEMPTS = env.int("ACCEPTANCE_RUN_MAX_ATTEMPTS", default=3)
ACCEPTANCE_RUN_LOG_MAX_CHARS = env.int("ACCEPTANCE_RUN_LOG_MAX_CHARS", default=256 * 1024)
# Runs' working directories: a directory of calculet's own, so the sweeper removes only what runs left.
ACCEPTANCE_RUN_DIR = Path(env.str("ACCEPTANCE_RUN_DIR", default=str(DATA_DIR / "runs")))
ACCEPTANCE_RUN_DIR.mkdir(parents=True, exist_ok=True)
ACCEPTANCE_SWEEP_INTERVAL = env.int("ACCEPTANCE_SWEEP_INTERVAL", default=10)
ACCEPTANCE_QUEUED_RESEND_AFTER = env.int("ACCEPTANCE_QUEUED_RESEND_AFTER", default=30)
# A sweep older than this fails /readyz and ops_status: beat (or the default worker) has stopped.
ACCEPTANCE_SWEEP_STALE_AFTER = env.int("ACCEPTANCE_SWEEP_STALE_AFTER", default=120)
ACCEPTANCE_TARGET_HEARTBEAT_SECONDS = env.int("ACCEPTANCE_TARGET_HEARTBEAT_SECONDS", default=10)
ACCEPTANCE_TARGET_OFFLINE_AFTER = env.int("ACCEPTANCE_TARGET_OFFLINE_AFTER", default=60)
# How often beat looks for targets whose health check is due: every N runner-stage runs and every H hours
# since the last one (a target's own `health_check_every_runs` / `_hours` when set), and at once after a run
# ended in an infrastructure error.
ACCEPTANCE_HEALTH_CHECK_INTERVAL = env.int("ACCEPTANCE_HEALTH_CHECK_INTERVAL", default=300)
ACCEPTANCE_HEALTH_CHECK_EVERY_RUNS = env.int("ACCEPTANCE_HEALTH_CHECK_EVERY_RUNS", default=50)
ACCEPTANCE_HEALTH_CHECK_EVERY_HOURS = env.int("ACCEPTANCE_HEALTH_CHECK_EVERY_HOURS", default=24)
# A runner stage that ended in an infrastructure error is run again this many times before the team is told.
ACCEPTANCE_RUN_ERROR_RETRIES = env.int("ACCEPTANCE_RUN_ERROR_RETRIES", default=2)
# A chain run waiting this long for a target that cannot take it (out of rotation, in maintenance, no agent
# or worker polling, no runner) ends in error saying why.
ACCEPTANCE_RUN_QUEUE_TIMEOUT = env.int("ACCEPTANCE_RUN_QUEUE_TIMEOUT", default=6 * 3600)
ACCEPTANCE_HEALTH_PACKAGE = env.str("ACCEPTANCE_HEALTH_PACKAGE", default="")
ACCEPTANCE_RUNNER_WALL_SECONDS = env.int("ACCEPTANCE_RUNNER_WALL_SECONDS", default=1800)
ACCEPTANCE_RUNNER_MEMORY_MB = env.int("ACCEPTANCE_RUNNER_MEMORY_MB", default=4096)
ACCEPTANCE_RUNNER_OUTPUT_BYTES = env.int("ACCEPTANCE_RUNNER_OUTPUT_BYTES", default=16 * 1024**2)
ACCEPTANCE_RUNNER_FILE_BYTES = env.int("ACCEPTANCE_RUNNER_FILE_BYTES", default=1024**3)
ACCEPTANCE_RUNNER_WORKDIR_BYTES = env.int("ACCEPTANCE_RUNNER_WORKDIR_BYTES", default=2 * 1024**3)
# None keeps acceptance.policy.DEFAULT_POLICY (product.md section 4).
ACCEPTANCE_PROMOTION_POLICY = None
CELERY_TASK_ROUTES = {
    "acceptance.runs_sweep": {"queue": "default"},
    "acceptance.targets_health_check": {"queue": "default"},
    "acceptance.deliverable_check": {"queue": "default"},
    "acceptance.deliverable_checks_resend": {"queue": "default"},
    "vendor.uploads_expire": {"queue": "default"},
    "vendor.artifact_check": {"queue": "default"},
    "vendor.artifacts_check_resend": {"queue": "default"},
    "vendor.notification_email": {"queue": "default"},
    "vendor.webhook_deliver": {"queue": "default"},
    "vendor.questions_due_notify": {"queue": "default"},
}
CELERY_BEAT_SCHEDULE = {
    "acceptance-sweep": {
        "task": "acceptance.runs_sweep",
        "schedule": ACCEPTANCE_SWEEP_INTERVAL,
        "options": {"expires": ACCEPTANCE_SWEEP_INTERVAL},
    },
    "acceptance-health-checks": {
        "task": "acceptance.targets_health_check",
        "schedule": ACCEPTANCE_HEALTH_CHECK_INTERVAL,
        "options": {"expires": ACCEPTANCE_HEALTH_CHECK_INTERVAL},
    },
    "acceptance-deliverable-checks-resend": {
        "task": "acceptance.deliverable_checks_resend",
        "schedule": 600,
        "options": {"expires": 600},
    },
    "vendor-uploads-expire": {"task": "vendor.uploads_expire", "schedule": 3600, "options": {"expires": 3600}},
    "vendor-artifacts-check-resend": {
        "task": "vendor.artifacts_check_resend",
        "schedule": 600,
        "options": {"expires": 600},
    },
    # E-mails and webhook deliveries whose message was lost (vendor.services.webhooks.RESEND_AFTER).
    "vendor-notifications-resend": {
        "task": "vendor.notifications_resend",
        "schedule": 600,
        "options": {"expires": 600},
    },
    # Once a day, early: who has a question due soon or overdue (each told once per due date).
    "vendor-questions-due": {
        "task": "vendor.questions_due_notify",
        "schedule": crontab(hour=6, minute=0),
        "options": {"expires": 3600},
    },
}

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The proxies whose X-Forwarded-For is believed (addresses or networks): the throttles count a request against
# the client address such a proxy saw, and against the connection's peer when it is not one of them.
TRUSTED_PROXIES = [ipaddress.ip_network(value, strict=False) for value in env.list("TRUSTED_PROXIES", default=[])]
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SESSION_COOKIE_SECURE = env.bool("SECURE_COOKIES", default=False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = SECURE_HSTS_SECONDS > 0
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

LOG_FORMAT = env.str("LOG_FORMAT", default="text")
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "calculet.logs.ContextFilter"}},
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "calculet.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["context"]},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
}
