"""What an answer to each question must deliver, from the seed's acceptance column (section 12), its evidence
grades (section 1) and its closing rule (section 13). Data only: the import reads it.

A deliverable's kind says how it is accepted:

- `calbin`: a model package (or the runtime running one); the probes of each capability it names run
  through the chain (runner, golden, failure, integration, soak) on a target. One package proves only
  what it is: V18's batches 4, 8 and 16 are three deliverables.
- `sdk`: headers and a library of one version; the entry points each capability needs are declared in
  the headers and defined in the library's dynamic symbols, and the answer's minimal example builds.
- `container_image`: an OCI image archive that verifies offline (layout, manifest, layer digests) with an
  SBOM and a licence file; where the answer gives a build command, it is run twice and must give the
  same bytes (V03). `commits` (V01): the image holds the first component's executable and its SBOM gives each
  component at the seed's commit (C03 calcc, C04 TVM).
- `schema`: a JSON Schema that accepts the current package's metadata (`schema_of` "package-metadata") and
  rejects the seed's A16 and A17 defects, and the fix its question asks (`asks`, one of SCHEMA_ASKS: V47 a
  version and required fields, V48 every size field's unit, V33 A16's unit fixed whatever it is written in, V43
  each sub-model's type tied to the sub-model, V46 machine-readable compatibility ranges); or, for a trace
  ("trace", V37: "schema + 解析器 + 示例"), the schema of the vendor's own trace format with a sample trace in it
  and the converter calculet runs to a Chrome trace.
- `onnx`: a model file; it must be an ONNX model (a ModelProto with a graph and an opset) whose SHA-256 begins with
  the hash the seed records for it (`sha256_prefix`: V04, C02's 316f06…).
- `tool`: a tool calculet runs in the sandbox on inputs it makes (`runs_on` "onnx": V05's checker, run on a valid
  ONNX model it must accept and on invalid ones it must refuse).
- `document`: a written answer, reviewed by a PM against `checklist` (items from the acceptance form).
  A document closes a question; it never moves a capability, so it names none.

Deliverables of a question with the same `either` are alternatives: one of them accepted is enough (V45: the
calls in a named SDK version, or the erratum removing them).

Every capability that capabilities.QUESTION_CAPABILITIES links to a question is proven by one of that
question's calbin, sdk, container_image or schema deliverables.
"""

from dataclasses import dataclass

from django.utils.translation import gettext_noop

KINDS = ("calbin", "sdk", "container_image", "schema", "onnx", "tool", "document")
SCHEMA_SUBJECTS = ("package-metadata", "trace")
SCHEMA_ASKS = ("version", "units", "A16", "A17", "compatibility")
TOOL_INPUTS = ("onnx",)


@dataclass(frozen=True)
class DeliverableSeed:
    key: str  # unique within the question
    kind: str  # one of KINDS
    title: str
    capabilities: tuple[str, ...] = ()  # the capabilities it proves (none for a document)
    checklist: tuple[str, ...] = ()  # document only: what the PM checks
    schema_of: str = ""  # schema only: one of SCHEMA_SUBJECTS
    either: str = ""  # deliverables of a question with the same `either` are alternatives: one is enough
    asks: str = ""  # package-metadata schema only: the fix its question asks of it, one of SCHEMA_ASKS
    # container image only: its SBOM must list its components' files by SHA-256, as the image holds them (V07)
    sbom_components: bool = False
    # container image only: (component, commit prefix) the image holds, the first its executable (V01: C03, C04)
    commits: tuple[tuple[str, str], ...] = ()
    sha256_prefix: str = ""  # onnx only: the seed's hash of the file (V04: C02)
    runs_on: str = ""  # tool only: what calculet runs it on, one of TOOL_INPUTS


def calbin(key: str, title: str, *capabilities: str) -> DeliverableSeed:
    return DeliverableSeed(key, "calbin", title, capabilities=capabilities)


def sdk(key: str, title: str, *capabilities: str, either: str = "") -> DeliverableSeed:
    return DeliverableSeed(key, "sdk", title, capabilities=capabilities, either=either)


def image(
    key: str,
    title: str,
    *capabilities: str,
    sbom_components: bool = False,
    commits: tuple[tuple[str, str], ...] = (),
) -> DeliverableSeed:
    return DeliverableSeed(
        key, "container_image", title, capabilities=capabilities, sbom_components=sbom_components, commits=commits
    )


def schema(key: str, title: str, schema_of: str, *capabilities: str, asks: str = "") -> DeliverableSeed:
    return DeliverableSeed(key, "schema", title, capabilities=capabilities, schema_of=schema_of, asks=asks)


def onnx(key: str, title: str, *, sha256_prefix: str) -> DeliverableSeed:
    return DeliverableSeed(key, "onnx", title, sha256_prefix=sha256_prefix)


def tool(key: str, title: str, *, runs_on: str) -> DeliverableSeed:
    return DeliverableSeed(key, "tool", title, runs_on=runs_on)


def document(key: str, title: str, *checklist: str, either: str = "") -> DeliverableSeed:
    return DeliverableSeed(key, "document", title, checklist=checklist, either=either)


COMPILE = "reproducible-compile"
METADATA = "calbin-metadata-schema"

QUESTION_DELIVERABLES: dict[str, tuple[DeliverableSeed, ...]] = {
    # 12.1 Compiler and reproducible supply chain
    # C03 and C04: the commits of calcc and TVM both sub-models record.
    "V01": (
        image(
            "compiler-container",
            gettext_noop("Compiler container at a fixed digest, holding calcc 575c2d… and TVM 7aebd1…"),
            COMPILE,
            commits=(("calcc", "575c2d"), ("tvm", "7aebd1")),
        ),
    ),
    "V02": (
        document(
            "release-statement",
            gettext_noop("Whether calcc and TVM may be released to us"),
            "States whether calcc 575c2d… may be released, as binary or source",
            "States whether TVM 7aebd1… may be released, as binary or source",
            "Maps each released binary to its source and commit",
        ),
    ),
    "V03": (
        image("compile-script", gettext_noop("One-step compile of the current Qwen3 package, reproducible"), COMPILE),
    ),
    # C02: both sub-models record the same ONNX hash, 316f06…; the file delivered must be that one.
    "V04": (
        onnx("original-onnx", gettext_noop("The original ONNX, SHA-256 316f06… (C02)"), sha256_prefix="316f06"),
        document(
            "external-data",
            gettext_noop("The ONNX's external data"),
            "Any external data files are delivered with their SHA-256, or the answer states there are none",
        ),
    ),
    "V05": (
        document(
            "onnx-requirements",
            gettext_noop("ONNX input requirements"),
            "Names the ONNX dialect and the opsets accepted",
            "Says which dynamic shapes are accepted and how they are declared",
            "Says how external data must be laid out",
        ),
        tool("onnx-checker", gettext_noop("ONNX input checker, run on valid and invalid models"), runs_on="onnx"),
    ),
    "V06": (
        image("quantisation-tool", gettext_noop("Quantisation tool with a replayable configuration"), COMPILE),
        document(
            "calibration-description",
            gettext_noop("Calibration set and quantisation rules"),
            "Describes the calibration set's format, size and origin",
            "States the W8A8 rules (which tensors, granularity, scales)",
            "States the W4AF16 rules",
            "Names the layers kept in higher precision",
        ),
    ),
    # V07 asks how the versions of passes, codegen, C oplib and kernels correspond: the SBOM must say so of the
    # very files the image holds.
    "V07": (
        image(
            "component-manifest",
            gettext_noop("Manifest and SBOM of passes, codegen, C oplib and kernels"),
            COMPILE,
            sbom_components=True,
        ),
    ),
    "V08": (
        schema("metadata-schema", gettext_noop("Package metadata schema"), "package-metadata", METADATA),
        calbin("golden-package", gettext_noop("Package whose golden reads back and reproduces"), "golden-readback"),
        sdk("package-parser", gettext_noop("Package parser and golden reader in the SDK"), "golden-readback"),
        document(
            "package-format",
            gettext_noop("Versioned package format document and parser"),
            "The document carries a format version",
            "Describes every file of the package and every metadata field",
            "Says how the golden is generated",
            "A parser is delivered for the same version",
        ),
    ),
    "V09": (
        document(
            "ci-licence",
            gettext_noop("Written licence to use the compiler in our CI"),
            "Written authorisation to run the compiler and its licence in our CI",
            "The deployment method (offline, licence server, host binding)",
            "Limits: hosts, seats, term",
        ),
    ),
    # 12.2 Operators and kernels
    "V10": (
        document(
            "support-matrix",
            gettext_noop("Operator, shape, dtype and quantisation support matrix"),
            "Covers every op with its shapes, dtypes and quantisation",
            "Distinguishes prefill from decode",
            "Distinguishes chip models",
        ),
    ),
    "V11": (
        calbin(
            "cpu-fallback-package",
            gettext_noop("Package with a CPU-fallback op, visible in the profile"),
            "custom-kernel-sdk",
        ),
        document(
            "fallback-semantics",
            gettext_noop("CPU fallback semantics"),
            "Says whether a CPU fallback exists and when it is taken",
            "Says how a fallback shows in the profile and trace",
            "States its performance and correctness semantics",
        ),
    ),
    "V12": (
        sdk("kernel-sdk", gettext_noop("Custom op/kernel SDK headers and library"), "custom-kernel-sdk"),
        document(
            "kernel-sdk-guide",
            gettext_noop("Custom kernel SDK guide"),
            "A worked example of a custom op",
            "The ABI a kernel must follow",
            "How to use the debugger",
            "Which performance counters a kernel can read",
        ),
    ),
    "V13": (
        document(
            "fusion-control",
            gettext_noop("Fusion pass control and A/B"),
            "The compile flags that enable and disable each fusion",
            "An unfused golden to compare a fused package against",
        ),
    ),
    "V14": (
        document(
            "flash-attention-bounds",
            gettext_noop("Flash attention bounds and fallback"),
            "Supported sequence, batch, head and dtype ranges",
            "What happens outside them (fallback)",
        ),
    ),
    "V15": (
        document(
            "grouped-moe-contract",
            gettext_noop("Grouped MoE kernel contract"),
            "Token bucket sizes",
            "Top-k and expert limits",
            "The kernel's numerical error",
        ),
    ),
    "V16": (
        document(
            "router-precision",
            gettext_noop("Router and top-k precision policy"),
            "Whether the router and top-k may stay in BF16 or FP32",
            "The mixed-precision policy and how to select it",
        ),
    ),
    "V17": (
        calbin("sampling-package", gettext_noop("Package that samples on the NPU"), "npu-sampling"),
        document(
            "sampling-contract",
            gettext_noop("Sampling output and parameters"),
            "The output format (token ids, per lane)",
            "The random number generator and how it is seeded",
            "The sampling parameters supported and their ranges",
        ),
    ),
    # 12.3 Batch, concurrency and KV
    "V18": (
        calbin("package-batch-4", gettext_noop("Model package at decode batch 4"), "decode-batch-4"),
        calbin("package-batch-8", gettext_noop("Model package at decode batch 8"), "decode-batch-8"),
        calbin("package-batch-16", gettext_noop("Model package at decode batch 16"), "decode-batch-16"),
    ),
    "V19": (
        calbin(
            "prefill-shape-package",
            gettext_noop("Package with its prefill shape profile"),
            "prefill-batch-dynamic-shape",
        ),
        document(
            "shape-profile",
            gettext_noop("Prefill shape profile and slicing semantics"),
            "The prefill batches and lengths (or dynamic ranges) supported",
            "How an input is padded or sliced to them",
        ),
    ),
    "V20": (
        sdk(
            "parallel-mode-sdk",
            gettext_noop("Parallel mode and non-blocking C API in the SDK"),
            "parallel-mode",
            "c-api-nonblocking",
        ),
        calbin(
            "parallel-mode-runs",
            gettext_noop("Parallel mode exercised from several threads"),
            "parallel-mode",
            "c-api-nonblocking",
        ),
    ),
    # The seed does not say what PING/PONG is (V21 asks; A14's command file is named "ping"), so no probe can
    # know it: the runs prove what an overlap is built on, I06's fixed task and I08's SubmitJob in parallel mode,
    # and what PING/PONG is, with its timing diagram, is the document's to say.
    "V21": (
        sdk("fixed-task-sdk", gettext_noop("Fixed task and SubmitJob in the SDK"), "fixed-task-infer", "parallel-mode"),
        calbin(
            "overlap-runs",
            gettext_noop("Fixed-task jobs submitted in parallel mode, overlapping on a runner (not PING/PONG itself)"),
            "fixed-task-infer",
            "parallel-mode",
        ),
        document(
            "ping-pong",
            gettext_noop("What PING/PONG is"),
            "Says whether PING/PONG is a buffer bank, an engine or a command slot",
            "An overlap timing diagram",
            "A worked example, naming the fixed-task and SubmitJob calls it makes",
        ),
    ),
    "V22": (
        sdk(
            "buffer-counters-sdk",
            gettext_noop("OutputBuf states and counters in the SDK"),
            "output-buffer-wait",
            "device-counters-trace",
        ),
        document(
            "buffer-counter-definitions",
            gettext_noop("OutputBuf states and counters defined"),
            "Each state's meaning and transitions",
            "Each counter's unit",
            "Which reads are atomic",
            "When each counter is cleared",
        ),
    ),
    "V23": (
        sdk("cancel-timeout-sdk", gettext_noop("Job cancel and timeout in the SDK"), "job-cancel-timeout"),
        calbin("cancel-timeout-runs", gettext_noop("Jobs cancelled and timed out on a runner"), "job-cancel-timeout"),
        document(
            "job-lifecycle",
            gettext_noop("Cancel and timeout lifecycle"),
            "What happens to in-flight DMA on cancel or timeout",
            "What happens to the job's KV",
            "When its buffers may be reused",
        ),
    ),
    "V24": (
        calbin(
            "lane-mapping-runs",
            gettext_noop("Lanes and KV slots mapped, masked and reused"),
            "kv-manager-api",
            "kv-batch-layout",
            "kv-seq-min-max",
        ),
        document(
            "lane-slot-rules",
            gettext_noop("Batch lane and KV slot rules"),
            "How a sequence maps to a lane and a KV slot",
            "How an inactive lane is masked",
            "When and how a slot is reclaimed",
        ),
    ),
    "V25": (
        calbin(
            "s8-v-cache-package", gettext_noop("Package with an S8 V cache"), "s8-v-cache-calbin", "kv-batch-layout"
        ),
        document(
            "s8-cache-spec",
            gettext_noop("S8 cache specification"),
            "Whether only V or both K and V are quantised",
            "Its accuracy against BF16",
            "Its layout",
            "Its capacity formula",
        ),
    ),
    "V26": (
        calbin(
            "kv-shift-runs",
            gettext_noop("Remove, copy, keep, add, div and state through DoShift, on a package of two lanes or more"),
            "kv-manager-api",
        ),
        document(
            "doshift-table",
            gettext_noop("DoShift against llama.cpp KV semantics"),
            "A table of remove, copy, keep, add, div and state against DoShift",
            "What is refused and how",
        ),
    ),
    "V27": (
        calbin(
            "kv-recovery-runs", gettext_noop("KV failure and rollback exercised"), "kv-manager-api", "error-mapping"
        ),
        document(
            "kv-recovery-contract",
            gettext_noop("KV failure recovery contract"),
            "Which state rolls back after a KV failure",
            "Request-level recovery",
            "Device-level recovery",
        ),
    ),
    # 12.4 Chiplets, memory and topology
    "V28": (
        sdk(
            "memory-metrics-sdk",
            gettext_noop("Memory and topology readable through the runtime"),
            "device-counters-trace",
        ),
        document(
            "memory-topology-spec",
            gettext_noop("Official memory and topology specification"),
            "DRAM and SRAM per chiplet and per board",
            "Bandwidths",
            "The interconnect topology",
        ),
    ),
    "V29": (
        document(
            "tensor-parallel-split",
            gettext_noop("The current two-chiplet TP split"),
            "The matrix dimensions split in each layer",
            "Where gather, reduce and D2D happen",
        ),
    ),
    "V30": (
        calbin(
            "single-chiplet-package",
            gettext_noop("Small single-chiplet package with chip affinity"),
            "single-chiplet",
            "two-models-one-chiplet",
        ),
    ),
    "V31": (
        calbin(
            "two-models-runs",
            gettext_noop("Two single-chiplet packages, one per chiplet, configured at once with fault isolation"),
            "two-models-two-chiplets",
        ),
        document(
            "isolation-contract",
            gettext_noop("Two-model isolation contract"),
            "Addresses of each model",
            "Queues of each model",
            "What a reset of one does to the other",
            "Fault isolation between them",
        ),
    ),
    "V32": (
        calbin("pipeline-parallel-package", gettext_noop("Package laid out pipeline-parallel"), "pipeline-parallel"),
        calbin("expert-parallel-package", gettext_noop("Package laid out expert-parallel"), "expert-parallel"),
        document(
            "layout-cost-model",
            gettext_noop("TP, PP and EP compared"),
            "The same model compiled TP, PP and EP",
            "How the compiler chooses (its cost model)",
        ),
    ),
    "V33": (
        schema(
            "memory-unit-schema",
            gettext_noop("Metadata schema with device_memory_required's unit fixed"),
            "package-metadata",
            METADATA,
            asks="A16",
        ),
    ),
    "V34": (
        document(
            "reservation-scope",
            gettext_noop("Reservation scope"),
            "Whether a reservation is per chiplet or a board-wide logical address",
            "What a chip mask means",
            "Address aliases and physical allocation",
        ),
    ),
    "V35": (
        calbin(
            "resident-packages",
            gettext_noop("Packages loaded and unloaded while another serves"),
            "dynamic-resident-multi-model",
            "two-models-one-chiplet",
        ),
        document(
            "residency-contract",
            gettext_noop("Resident model contract"),
            "Model handles",
            "Namespaces",
            "Quotas",
            "Unloading",
        ),
    ),
    "V36": (
        document(
            "multi-device-roadmap",
            gettext_noop("Multi-device roadmap"),
            "The version that supports several physical devices",
            "Its API",
            "How to migrate from 0.7.6",
        ),
    ),
    # 12.5 Trace, counters and performance
    "V37": (
        schema(
            "trace-schema",
            gettext_noop("Trace schema of the vendor's format, a sample trace and its converter to a Chrome trace"),
            "trace",
            "device-counters-trace",
        ),
        sdk("trace-sdk", gettext_noop("Trace and full debug in the SDK"), "device-counters-trace", "full-debug"),
        document(
            "trace-format",
            gettext_noop("Trace format"),
            "Every field and its meaning",
            "The clock and its unit",
            "The overhead of tracing",
            "A parser and an example trace",
        ),
    ),
    "V38": (
        sdk("counters-sdk", gettext_noop("Per-op and per-chip counters in the SDK"), "device-counters-trace"),
        document(
            "counter-list",
            gettext_noop("Counter list"),
            "Per-op and per-chip cycles",
            "D2D, DDR and PCIe bytes",
            "When each counter resets",
        ),
    ),
    "V39": (
        document(
            "model-workload-api",
            gettext_noop("GetModelWorloadByName defined"),
            "The formal API definition",
            "The unit of what it returns",
            "How the misspelt name stays compatible",
        ),
    ),
    "V40": (
        document(
            "dynamic-d2d",
            gettext_noop("Static command size against dynamic traffic"),
            "How static command dataSize relates to real traffic",
            "How dynamic D2D traffic is computed",
        ),
    ),
    "V41": (
        document(
            "telemetry-api",
            gettext_noop("Temperature, power, frequency and throttle API"),
            "The API for each reading",
            "Sampling frequency",
            "Units",
        ),
    ),
    "V42": (calbin("golden-runs", gettext_noop("The current package's golden passes on a runner"), "golden-readback"),),
    # 12.6 Metadata and compatibility defects
    "V43": (
        schema(
            "submodel-type-schema",
            gettext_noop("Metadata schema that refuses a mislabelled prefill"),
            "package-metadata",
            METADATA,
            asks="A17",
        ),
        document(
            "submodel-type-fix",
            gettext_noop("The prefill's smodel_type fixed"),
            "The version that fixes the prefill's label",
            "How runtimes treat packages with the old label",
        ),
    ),
    "V44": (
        document(
            "versioned-api-docs",
            gettext_noop("API documentation per version"),
            "Every name and return type that differs between the PDF and 0.7.6",
            "A document per released version",
        ),
    ),
    # Either the calls exist in a named version (its SDK carries them), or they never did and the PDF is corrected.
    "V45": (
        sdk(
            "relocation-api",
            gettext_noop("RelocateTensorAddress and AllocDevMem in the SDK of the version that has them"),
            "pdf-relocate-alloc",
            either="relocation",
        ),
        document(
            "relocation-erratum",
            gettext_noop("The erratum removing RelocateTensorAddress and AllocDevMem from the documentation"),
            "Names both calls and the PDF passages that describe them",
            "States that no released version has them, and what to call instead",
            "The corrected documentation is delivered",
            either="relocation",
        ),
    ),
    "V46": (
        schema(
            "compat-schema",
            gettext_noop("Machine-readable compatibility rules"),
            "package-metadata",
            METADATA,
            asks="compatibility",
        ),
        calbin("error-code-runs", gettext_noop("The runtime's error codes, each reached on a runner"), "error-codes"),
    ),
    "V47": (
        schema(
            "versioned-metadata-schema",
            gettext_noop("Versioned metadata schema with required fields"),
            "package-metadata",
            METADATA,
            asks="version",
        ),
    ),
    "V48": (
        schema(
            "field-units-schema",
            gettext_noop("Metadata schema with every field's unit"),
            "package-metadata",
            METADATA,
            asks="units",
        ),
        document(
            "field-definitions",
            gettext_noop("Metadata field definitions"),
            "Each address, size, workload and memory field's unit",
            "Spelling fixed",
            "Ambiguities resolved",
        ),
    ),
    # 12.7 Reset, recovery and operations
    "V49": (
        calbin(
            "exception-recovery-runs",
            gettext_noop("Recovery after a core exception"),
            "output-buffer-wait",
            "device-reset",
        ),
        document(
            "recovery-domain",
            gettext_noop("Minimal recovery domain"),
            "Whether KV and DRAM can be trusted after a CCU exception",
            "The smallest domain to reset",
        ),
    ),
    "V50": (
        calbin("reset-scope-runs", gettext_noop("Each reset's reach exercised"), "device-reset"),
        document(
            "reset-scope",
            gettext_noop("Reset scope"),
            "Effect of ResetCCU, ResetConfiguration and ResetDevice on in-flight jobs",
            "On the other chiplet and its models",
            "On the driver's state",
        ),
    ),
    "V51": (
        calbin(
            "reset-drain-runs",
            gettext_noop("Jobs drained and released, then reset, nothing in flight lost"),
            "device-reset",
        ),
        document(
            "reset-state-machine",
            gettext_noop("Reset state machine"),
            "Whether drain or Release is required before a reset",
            "The state machine",
            "Its timeouts",
        ),
    ),
    "V52": (
        calbin("reconfigure-runs", gettext_noop("Runnable example: reset, configure, load, serve"), "device-reset"),
    ),
    "V53": (
        calbin(
            "error-classification-runs",
            gettext_noop("Error codes classified and retried"),
            "error-codes",
            "error-mapping",
        ),
        document(
            "retry-policy",
            gettext_noop("Retry, backoff and isolation"),
            "Error codes classified (retry, reset, isolate)",
            "The recommended retry and backoff",
            "When to take a device out of service",
        ),
    ),
    "V54": (
        sdk("clear-memory-sdk", gettext_noop("ClearDynamicMem and ClearAllDevMem in the SDK"), "device-reset"),
        document(
            "clear-memory-constraints",
            gettext_noop("Memory clearing constraints"),
            "Thread safety",
            "What data each call destroys",
        ),
    ),
    # 12.8 cal-llm / EngineCore
    "V55": (sdk("enginecore-sdk", gettext_noop("EngineCore headers, library and package"), "enginecore"),),
    "V56": (
        document(
            "enginecore-architecture",
            gettext_noop("EngineCore architecture and support"),
            "Whether EngineCore replaces CalRT or wraps it",
            "The support period of each",
        ),
    ),
    "V57": (
        sdk("enginecore-api", gettext_noop("EngineCore batch, KV, cancel, sampling and profile API"), "enginecore"),
        document(
            "enginecore-contract",
            gettext_noop("EngineCore API contract"),
            "Batch, KV, cancel, sampling and profile: what each supports",
            "An example of each",
        ),
    ),
    "V58": (
        image("conversion-tool", gettext_noop("Package conversion tool"), "enginecore"),
        document(
            "enginecore-compat",
            gettext_noop("EngineCore compatibility with current packages"),
            "A compatibility matrix against current packages",
            "How to use the conversion tool",
        ),
    ),
    "V59": (
        image("migration-image", gettext_noop("Runnable EngineCore image"), "enginecore"),
        document(
            "migration-plan",
            gettext_noop("Migration, A/B and rollback"),
            "The migration path from the current production",
            "How to run A/B",
            "How to roll back",
        ),
    ),
    "V60": (
        document(
            "version-policy",
            gettext_noop("API/ABI stability and release policy"),
            "What API and ABI stability is promised, per version",
            "Release dates",
        ),
    ),
}
