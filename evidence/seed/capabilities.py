"""The starting capabilities and which questions can move them. Data only: the import reads it.

A capability's initial status is `status`, unless `status_from` names an evidence row and qualifier:
then the status that row gives that qualifier sets it (I06 "C1 fixed" -> the fixed task starts at C1).
Where the row gives the qualifier several statuses (K05 C0/C1, I14 debug C1/C4), `status` picks among
them; if the document no longer gives `status`, the least mature one the row gives is taken.
The status is only set when the capability is created; after that only the promotion gate moves it.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class CapabilitySeed:
    slug: str
    title: str
    status: str
    pinned: bool = False
    scope: str = ""
    evidence: tuple[str, ...] = ()
    status_from: tuple[str, str] | None = None
    description: str = ""


# Section 13: these stay at their status until new artifacts and real tests exist.
PINNED = [
    CapabilitySeed("multi-board", "多板（multi-board）", "C3", pinned=True, evidence=("I09",)),
    CapabilitySeed("two-models-one-chiplet", "单芯粒双模型（two models on one chiplet）", "C3", pinned=True),
    CapabilitySeed("expert-parallel", "Expert parallel（EP）", "C3", pinned=True, evidence=("M12", "M13")),
    CapabilitySeed("dynamic-resident-multi-model", "动态多模型常驻（dynamic resident multi-model）", "C3", pinned=True),
    CapabilitySeed("npu-sampling", "NPU sampling（top-k/sampling on the NPU）", "C3", pinned=True),
    CapabilitySeed(
        "multi-physical-device-calrt-0-7-6",
        "多物理设备（multi-physical-device on CalRT 0.7.6）",
        "C4",
        pinned=True,
        scope="CalRT 0.7.6",
        evidence=("I09",),
        description="A newer CalRT version is a different capability row.",
    ),
]

# One per evidence row that names a C1 capability, and the C2–C4 ones those rows and others name.
FROM_EVIDENCE = [
    CapabilitySeed(
        "kv-seq-min-max", "KV seq min/max 委托 Runtime（全场景）", "C1", evidence=("K05",), status_from=("K05", "")
    ),
    CapabilitySeed(
        "kv-manager-api",
        "SDK KvManager canAllocate/Allocate/Free/Apply/DoShift/Clear",
        "C1",
        evidence=("K07",),
        status_from=("K07", ""),
    ),
    CapabilitySeed(
        "kv-batch-layout", "SDK KV batch layout 与 BF16/S8 V-cache", "C1", evidence=("K08",), status_from=("K08", "")
    ),
    CapabilitySeed(
        "s8-v-cache-calbin",
        "S8 V-cache 新 calbin",
        "C3",
        evidence=("K08",),
        status_from=("K08", "新 calbin"),
    ),
    CapabilitySeed("fixed-task-infer", "Fixed task infer", "C1", evidence=("I06",), status_from=("I06", "fixed")),
    CapabilitySeed(
        "output-buffer-wait",
        "OutputBuf pending/running/done/CCU exception 与 Wait",
        "C1",
        evidence=("I07",),
        status_from=("I07", ""),
    ),
    CapabilitySeed(
        "parallel-mode",
        "VirtualDevice SubmitJob 与 parallel mode",
        "C1",
        evidence=("I08", "R10"),
        status_from=("I08", ""),
    ),
    CapabilitySeed("golden-readback", "SDK 读取 golden", "C1", evidence=("I11",), status_from=("I11", "")),
    CapabilitySeed(
        "device-counters-trace",
        "Queue counters、memory 与 trace",
        "C1",
        evidence=("I12",),
        status_from=("I12", ""),
    ),
    CapabilitySeed(
        "c-api-nonblocking", "C API blocking/nonblocking/wait", "C1", evidence=("I13",), status_from=("I13", "")
    ),
    CapabilitySeed("full-debug", "Full debug", "C1", evidence=("I14",), status_from=("I14", "debug")),
    CapabilitySeed("error-codes", "错误码 0-29", "C1", evidence=("I15",), status_from=("I15", "")),
    CapabilitySeed("error-mapping", "错误码到服务错误的映射", "C2", evidence=("I15",), status_from=("I15", "错误映射")),
    CapabilitySeed(
        "device-reset", "Per-chip memory 与 reset（特权面）", "C4", evidence=("I10",), status_from=("I10", "特权面")
    ),
    CapabilitySeed(
        "pdf-relocate-alloc",
        "PDF-only RelocateTensorAddress/AllocDevMem",
        "C4",
        evidence=("I05",),
        status_from=("I05", ""),
    ),
    CapabilitySeed(
        "reproducible-compile",
        "可复现编译链（compiler container、原始 ONNX、calcc/TVM）",
        "C3",
        evidence=("C01", "C03", "C04", "C05", "C06"),
        status_from=("C06", ""),
    ),
    CapabilitySeed(
        "calbin-metadata-schema",
        "calbin metadata schema 与单位",
        "C3",
        evidence=("A16", "A17"),
        status_from=("A17", "metadata"),
    ),
    CapabilitySeed(
        "enginecore", "cal-llm / EngineCore（origin/runtime_replace）", "C3", evidence=("B08",), status_from=("B08", "")
    ),
]

# What the vendor questions ask for; the seed names no status for these, so they start where the toolchain is.
FROM_QUESTIONS = [
    CapabilitySeed("decode-batch-4", "Decode batch 4 calbin", "C3", evidence=("M06",)),
    CapabilitySeed("decode-batch-8", "Decode batch 8 calbin", "C3", evidence=("M06",)),
    CapabilitySeed("decode-batch-16", "Decode batch 16 calbin", "C3", evidence=("M06",)),
    CapabilitySeed("prefill-batch-dynamic-shape", "Prefill batch 与动态 shape", "C3", evidence=("M06",)),
    CapabilitySeed("single-chiplet", "单芯粒 calbin 与 chip affinity", "C3", evidence=("M06",)),
    CapabilitySeed("pipeline-parallel", "Pipeline parallel（PP）", "C3", evidence=("M13",)),
    CapabilitySeed("custom-kernel-sdk", "自定义 op/kernel SDK 与 fusion 控制", "C3", evidence=("C05",)),
    # V23 asks whether a safe cancel and time-out exist; I07's OutputBuf and Wait are not a cancel.
    CapabilitySeed(
        "job-cancel-timeout", "Job cancel/timeout 安全接口（DMA、KV、buffer 生命周期）", "C3", evidence=("I07",)
    ),
    # V31: one independent model per chiplet, not two on one chiplet (section 13's pinned one).
    CapabilitySeed("two-models-two-chiplets", "双芯粒各 configure 一个独立模型（故障隔离）", "C3", evidence=("M06",)),
]

CAPABILITIES: list[CapabilitySeed] = PINNED + FROM_EVIDENCE + FROM_QUESTIONS

# The capabilities an answer to each question could move: those a package, SDK, image or schema it must
# deliver can prove (evidence/seed/deliverables.py). A question whose answer is only written (V02, V09,
# V60 ...) moves none: a document closes a question, never moves a capability. A batch is proven by its own
# package (V18), not by V24's lane rules; residency by V35, sampling by V17. V36 asks for a roadmap, so it
# moves neither multi-device capability: no question of the seed asks for a running multi-board package. V05's
# ONNX checker says what input the compiler takes, not that a compile reproduces: it moves none either.
QUESTION_CAPABILITIES: dict[str, tuple[str, ...]] = {
    "V01": ("reproducible-compile",),
    "V03": ("reproducible-compile",),
    "V06": ("reproducible-compile",),
    "V07": ("reproducible-compile",),
    "V08": ("calbin-metadata-schema", "golden-readback"),
    "V11": ("custom-kernel-sdk",),
    "V12": ("custom-kernel-sdk",),
    "V17": ("npu-sampling",),
    "V18": ("decode-batch-4", "decode-batch-8", "decode-batch-16"),
    "V19": ("prefill-batch-dynamic-shape",),
    "V20": ("parallel-mode", "c-api-nonblocking"),
    "V21": ("parallel-mode", "fixed-task-infer"),
    "V22": ("output-buffer-wait", "device-counters-trace"),
    "V23": ("job-cancel-timeout",),
    "V24": ("kv-manager-api", "kv-batch-layout", "kv-seq-min-max"),
    "V25": ("kv-batch-layout", "s8-v-cache-calbin"),
    "V26": ("kv-manager-api",),
    "V27": ("kv-manager-api", "error-mapping"),
    "V28": ("device-counters-trace",),
    "V30": ("single-chiplet", "two-models-one-chiplet"),
    "V31": ("two-models-two-chiplets",),
    "V32": ("pipeline-parallel", "expert-parallel"),
    "V33": ("calbin-metadata-schema",),
    "V35": ("two-models-one-chiplet", "dynamic-resident-multi-model"),
    "V37": ("device-counters-trace", "full-debug"),
    "V38": ("device-counters-trace",),
    "V42": ("golden-readback",),
    "V43": ("calbin-metadata-schema",),
    "V45": ("pdf-relocate-alloc",),
    "V46": ("calbin-metadata-schema", "error-codes"),
    "V47": ("calbin-metadata-schema",),
    "V48": ("calbin-metadata-schema",),
    "V49": ("output-buffer-wait", "device-reset"),
    "V50": ("device-reset",),
    "V51": ("device-reset",),
    "V52": ("device-reset",),
    "V53": ("error-codes", "error-mapping"),
    "V54": ("device-reset",),
    "V55": ("enginecore",),
    "V57": ("enginecore",),
    "V58": ("enginecore",),
    "V59": ("enginecore",),
}
