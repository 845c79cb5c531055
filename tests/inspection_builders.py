"""Real inputs for the inspection checks (acceptance/inspection/), built in the test: headers and a shared
library with g++ and a minimal example (`build_sdk`, `example_source`: the simulator's stand-in SDK,
npu_sim/sdk.py), an OCI image archive with tarfile and hashlib (`build_oci_archive`, or `oci_image_files`
to break one), JSON Schemas of the simulator's package metadata that pass and one that fails, a vendor's own
trace format with its schema, sample and converter (`trace_delivery`),
and sources with a build command (`build_project`)."""

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Collection
from pathlib import Path

from npu_sim.sdk import build_sdk, example_source  # noqa: F401 - the tests' SDKs are the simulator's

# OCI image archives

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_TAR_LAYER = "application/vnd.oci.image.layer.v1.tar"
SPDX = {
    "spdxVersion": "SPDX-2.3",
    "dataLicense": "CC0-1.0",
    "SPDXID": "SPDXRef-DOCUMENT",
    "name": "calcc-compiler",
    "packages": [{"SPDXID": "SPDXRef-calcc", "name": "calcc", "versionInfo": "575c2d"}],
}
CYCLONEDX = {"bomFormat": "CycloneDX", "specVersion": "1.5", "components": [{"type": "application", "name": "tvm"}]}


def tar_bytes(
    files: dict[str, bytes],
    *,
    compress: bool = False,
    executable: Collection[str] = (),
    symlinks: dict[str, str] | None = None,
    hardlinks: dict[str, str] | None = None,
) -> bytes:
    """A tar (gzip when `compress`) of `files`, reproducible: sorted, times and owners zero; those `executable`
    names with their execute bits; then `symlinks` and `hardlinks` (name -> target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if compress else "w", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(files[name]), 0o755 if name in executable else 0o644
            archive.addfile(info, io.BytesIO(files[name]))
        links = [(tarfile.SYMTYPE, link) for link in (symlinks or {}).items()]
        links += [(tarfile.LNKTYPE, link) for link in (hardlinks or {}).items()]
        for kind, (name, target) in links:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            archive.addfile(info)
    return buffer.getvalue()


def add_blob(files: dict[str, bytes], data: bytes, media_type: str, **extra: object) -> dict:
    """Put `data` in the layout's blobs; its descriptor."""
    digest = hashlib.sha256(data).hexdigest()
    files[f"blobs/sha256/{digest}"] = data
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data), **extra}


def oci_image_files(
    *,
    sbom: str | None = "file",
    licence: bool = True,
    extra_layers: tuple[dict[str, bytes], ...] = (),
    sbom_document: dict | None = None,
    compiler_at: str = "usr/bin/calcc",
    symlinks: dict[str, str] | None = None,
    hardlinks: dict[str, str] | None = None,
    env: list[str] | None = None,
) -> dict[str, bytes]:
    """The members of an OCI image layout: a gzip layer holding the compiler at `compiler_at` and the links,
    then `extra_layers` (each {path: content}) as plain tar layers; `env` the config's Env. The SBOM as a file of
    the archive (`file`), as an attached SPDX artifact in the layout (`artifact`), as CycloneDX (`cyclonedx`), or
    none; `sbom_document` in place of the stock SPDX or CycloneDX one."""
    files: dict[str, bytes] = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode()}
    compiler = tar_bytes(
        {compiler_at: b"#!/bin/sh\necho calcc 575c2d\n"},
        executable={compiler_at},
        symlinks=symlinks,
        hardlinks=hardlinks,
    )
    layers = [add_blob(files, gzip.compress(compiler, mtime=0), OCI_LAYER)]
    diff_ids = [f"sha256:{hashlib.sha256(compiler).hexdigest()}"]
    for extra in extra_layers:
        layers.append(add_blob(files, tar_bytes(extra), OCI_TAR_LAYER))
        diff_ids.append(layers[-1]["digest"])
    config: dict = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    if env is not None:
        config["config"] = {"Env": env}
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": add_blob(files, json.dumps(config).encode(), OCI_CONFIG),
        "layers": layers,
    }
    manifests = [add_blob(files, json.dumps(manifest).encode(), OCI_MANIFEST)]
    if sbom == "file":
        files["sbom.spdx.json"] = json.dumps(sbom_document or SPDX).encode()
    elif sbom == "cyclonedx":
        files["bom.json"] = json.dumps(sbom_document or CYCLONEDX).encode()
    elif sbom == "artifact":
        artifact = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": "application/spdx+json",
            "config": add_blob(files, b"{}", "application/vnd.oci.empty.v1+json"),
            "layers": [add_blob(files, json.dumps(SPDX).encode(), "application/spdx+json")],
            "subject": manifests[0],
        }
        manifests.append(add_blob(files, json.dumps(artifact).encode(), OCI_MANIFEST))
    if licence:
        files["LICENSE"] = b"Licensed for evaluation in the buyer's CI.\n"
    files["index.json"] = json.dumps({"schemaVersion": 2, "manifests": manifests}).encode()
    return files


def write_oci_archive(path: Path, files: dict[str, bytes]) -> Path:
    path.write_bytes(tar_bytes(files))
    return path


def build_oci_archive(path: Path, **options) -> Path:
    """A complete image archive at `path` (options as `oci_image_files`)."""
    return write_oci_archive(path, oci_image_files(**options))


def replace_manifest(files: dict[str, bytes], manifest: dict) -> None:
    """Swap the image's manifest for `manifest`, the index pointing at it."""
    name, _ = only_manifest(files)
    del files[name]
    index = json.loads(files["index.json"])
    index["manifests"][0] = add_blob(files, json.dumps(manifest).encode(), index["manifests"][0]["mediaType"])
    files["index.json"] = json.dumps(index).encode()


def only_manifest(files: dict[str, bytes]) -> tuple[str, dict]:
    """The blob name and document of the image's (first) manifest."""
    descriptor = json.loads(files["index.json"])["manifests"][0]
    name = "blobs/sha256/" + descriptor["digest"].split(":")[1]
    return name, json.loads(files[name])


# V07: the compiler's components as compiled files (ELF or an `ar` archive), and an SBOM listing each by its
# SHA-256 under its versioned component.
COMPONENT_FILES = {
    "opt/cal/passes/libcal_passes.so": b"\x7fELF\x02\x01\x01passes 1.4.2",
    "opt/cal/bin/cal-codegen": b"\x7fELF\x02\x01\x01codegen 2.0.1",
    "opt/cal/lib/liboplib.a": b"!<arch>\noplib 0.9.3",
    "opt/cal/kernels/matmul.o": b"\x7fELF\x02\x01\x01kernel matmul 0.9.3",
}
COMPONENTS = {
    "cal-passes": ("1.4.2", ["opt/cal/passes/libcal_passes.so"]),
    "cal-codegen": ("2.0.1", ["opt/cal/bin/cal-codegen"]),
    "cal-oplib": ("0.9.3", ["opt/cal/lib/liboplib.a"]),
    "cal-kernels": ("0.9.3", ["opt/cal/kernels/matmul.o"]),
}


def component_sbom(files: dict[str, bytes] = COMPONENT_FILES, components=COMPONENTS) -> dict:
    """An SPDX 2.3 SBOM: each component a package with its version and `hasFiles`, each file its SHA-256."""
    document = {**SPDX, "packages": [], "files": []}
    for name, (version, paths) in components.items():
        ids = [f"SPDXRef-File-{path.replace('/', '-')}" for path in paths]
        document["packages"].append(
            {"SPDXID": f"SPDXRef-{name}", "name": name, "versionInfo": version, "hasFiles": ids}
        )
        for path, spdx_id in zip(paths, ids, strict=True):
            digest = hashlib.sha256(files[path]).hexdigest() if path in files else "0" * 64
            document["files"].append(
                {
                    "SPDXID": spdx_id,
                    "fileName": f"./{path}",
                    "checksums": [{"algorithm": "SHA256", "checksumValue": digest}],
                }
            )
    return document


# V37: a vendor's own trace format (not Chrome's), its schema, a sample and a converter to a Chrome trace.
VENDOR_TRACE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["clock_hz", "records"],
    "properties": {
        "clock_hz": {"type": "integer", "minimum": 1},
        "records": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["op", "chiplet", "start_cycle", "cycles"],
                "properties": {
                    "op": {"type": "string"},
                    "chiplet": {"type": "integer", "minimum": 0},
                    "start_cycle": {"type": "integer", "minimum": 0},
                    "cycles": {"type": "integer", "minimum": 0},
                },
            },
        },
    },
}
VENDOR_TRACE_SAMPLE = {
    "clock_hz": 1_000_000_000,
    "records": [
        {"op": "decoder_layer", "chiplet": 0, "start_cycle": 0, "cycles": 5000},
        {"op": "attention_qk", "chiplet": 0, "start_cycle": 0, "cycles": 4000},
        {"op": "softmax", "chiplet": 0, "start_cycle": 4000, "cycles": 1000},
        {"op": "matmul_ffn", "chiplet": 1, "start_cycle": 5000, "cycles": 9000},
    ],
}
# Where the sample keeps what a trace is for (trace.py: fields.json).
VENDOR_TRACE_FIELDS = {
    "events": "records",
    "name": "op",
    "thread": "chiplet",
    "start": "start_cycle",
    "duration": "cycles",
    "unit": "cycle",
    "clock_hz": "clock_hz",
}
# Reads the vendor's records from trace.in, writes one complete event per record (cycles to microseconds).
TRACE_CONVERTER = """import json
trace = json.load(open("trace.in"))
per_us = trace["clock_hz"] / 1e6
events = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "npu"}}]
for record in trace["records"]:
    events.append({"name": record["op"], "ph": "X", "pid": 0, "tid": record["chiplet"],
                   "ts": record["start_cycle"] / per_us, "dur": record["cycles"] / per_us})
json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, open("chrome-trace.json", "w"))
"""


def trace_delivery(root: Path, *, schema=None, sample=None, fields=None, converter: str = TRACE_CONVERTER) -> Path:
    """The V37 delivery unpacked at `root`: schema.json, sample.json, fields.json, convert.py and convert.txt."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "schema.json").write_text(json.dumps(VENDOR_TRACE_SCHEMA if schema is None else schema))
    (root / "sample.json").write_text(json.dumps(VENDOR_TRACE_SAMPLE if sample is None else sample))
    (root / "fields.json").write_text(json.dumps(VENDOR_TRACE_FIELDS if fields is None else fields))
    (root / "convert.py").write_text(converter)
    (root / "convert.txt").write_text("python3 convert.py\n")
    return root


# JSON Schemas

# A vendor's metadata schema that holds: sizes in units a board can hold (A16), exactly one prefill and the
# prefill labelled as one (A17); and the fixes V33, V43, V46, V47 and V48 ask: a pinned version with required
# fields, each size field's unit, compatibility ranges as version specifiers.
SPECIFIER = r"^\s*(>=|<=|==|!=|~=|>|<)\s*[0-9][0-9A-Za-z.+-]*\s*(,\s*(>=|<=|==|!=|~=|>|<)\s*[0-9][0-9A-Za-z.+-]*\s*)*$"
PACKAGE_METADATA_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schema_version", "name", "layout", "memory", "submodels", "compatibility"],
    "properties": {
        "schema_version": {"const": 2},
        "name": {"type": "string", "minLength": 1},
        "layout": {"enum": ["tp", "ep", "pp", "single_chiplet", "multi_board"]},
        "memory": {
            "type": "object",
            "required": ["device_memory_required"],
            "properties": {
                "device_memory_required": {"$ref": "#/$defs/size_on_a_board"},
                "chiplets": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {"dram": {"$ref": "#/$defs/bytes"}, "sram": {"$ref": "#/$defs/bytes"}},
                    },
                },
            },
        },
        "param_blocks": {"type": "array", "items": {"properties": {"size": {"$ref": "#/$defs/bytes"}}}},
        "submodels": {
            "type": "array",
            "items": {"$ref": "#/$defs/submodel"},
            "contains": {"properties": {"smodel_type": {"const": "llm_prefill"}}},
            "minContains": 1,
            "maxContains": 1,
        },
        "compatibility": {
            "type": "object",
            "required": ["calrt", "driver", "firmware", "chip"],
            "properties": {
                "calrt": {"type": "string", "pattern": SPECIFIER},
                "driver": {"type": "string", "pattern": SPECIFIER},
                "firmware": {"type": "string", "pattern": SPECIFIER},
                "chip": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
        },
    },
    "$defs": {
        "bytes": {"type": "integer", "minimum": 0, "unit": "B"},
        "size_on_a_board": {
            "type": "object",
            "required": ["value", "unit"],
            "oneOf": [
                {"properties": {"unit": {"const": "B"}, "value": {"type": "integer", "maximum": 64 * 2**30}}},
                {"properties": {"unit": {"enum": ["KB", "KiB"]}, "value": {"maximum": 64 * 2**20}}},
                {"properties": {"unit": {"enum": ["MB", "MiB"]}, "value": {"maximum": 64 * 2**10}}},
                {"properties": {"unit": {"enum": ["GB", "GiB"]}, "value": {"maximum": 64}}},
            ],
        },
        "tensor": {"properties": {"size": {"$ref": "#/$defs/bytes"}}},
        "submodel": {
            "type": "object",
            "required": ["name", "smodel_type", "batch", "inputs", "outputs"],
            "properties": {
                "smodel_type": {"enum": ["llm_prefill", "llm_decode"]},
                "batch": {"minimum": 1},
                "inputs": {"type": "array", "items": {"$ref": "#/$defs/tensor"}},
                "outputs": {"type": "array", "items": {"$ref": "#/$defs/tensor"}},
            },
            "if": {"properties": {"name": {"const": "prefill"}}},
            "then": {"properties": {"smodel_type": {"const": "llm_prefill"}}},
            "else": {"properties": {"smodel_type": {"const": "llm_decode"}}},
        },
    },
}

# Fails: accepts anything, so the seed's defects too.
PERMISSIVE_SCHEMA = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}


# Build commands


def build_project(root: Path, *, reproducible: bool = True) -> Path:
    """An answer's sources with `sh build.sh` writing `out/` (a compiled kernel and a package file); when not
    `reproducible`, the build also stamps the time it ran into `out/built-at`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "kernel.c").write_text("int kernel(int x) { return 2 * x + 1; }\n")
    stamp = "" if reproducible else "date +%s%N > out/built-at\n"
    (root / "build.sh").write_text(
        "set -e\nmkdir -p out\ncc -O2 -c kernel.c -o out/kernel.o\nprintf 'calbin v2\\n' > out/package_info.txt\n"
        + stamp
    )
    return root


# V04: a stand-in for the original ONNX whose SHA-256 begins with C02's 316f06: a graph with the seed's model's
# weights as initializers, their shapes and no data (`qwen3_model`), ending in a doc_string (ModelProto field 6)
# whose nonce was searched for once; and V05: a vendor's ONNX checker.
C02_NONCE = 766438


def add_model() -> bytes:
    """A valid ONNX model: z = Add(x, y) at opset 17."""
    from acceptance.inspection.onnx import encode_model

    return encode_model([("Add", ["x", "y"], ["z"])], inputs=["x", "y"], outputs=["z"])


QWEN3 = {"layers": 48, "hidden": 2048, "q_heads": 32, "kv_heads": 4, "head_dim": 128}
QWEN3 |= {"experts": 128, "expert_ffn": 768, "vocab": 151936}


def qwen3_model(**changes: int) -> bytes:
    """A ModelProto whose initializers have the shapes of the seed's model (M01-M04), `changes` to QWEN3 applied:
    embedding and lm_head, and in each layer q/k/v/o, the router and the experts' stacked FFN weights."""
    from acceptance.inspection.onnx import OPSET_17, _int, _len

    facts = QWEN3 | changes
    hidden, experts, ffn = facts["hidden"], facts["experts"], facts["expert_ffn"]
    shapes = {"embed_tokens": (facts["vocab"], hidden), "lm_head": (hidden, facts["vocab"])}
    for layer in range(facts["layers"]):
        at = f"layers.{layer}."
        shapes[at + "q_proj"] = (hidden, facts["q_heads"] * facts["head_dim"])
        shapes[at + "k_proj"] = (hidden, facts["kv_heads"] * facts["head_dim"])
        shapes[at + "v_proj"] = (hidden, facts["kv_heads"] * facts["head_dim"])
        shapes[at + "o_proj"] = (facts["q_heads"] * facts["head_dim"], hidden)
        shapes[at + "router"] = (hidden, experts)
        shapes[at + "experts.gate_up"] = (experts, hidden, 2 * ffn)
        shapes[at + "experts.down"] = (experts, ffn, hidden)
    initializers = b"".join(
        _len(5, b"".join(_int(1, size) for size in shape) + _int(2, 16) + _len(8, name))  # 16: BFLOAT16
        for name, shape in shapes.items()
    )
    node = _len(1, _len(1, "embed_tokens") + _len(1, "input_ids") + _len(2, "hidden") + _len(4, "Gather"))
    names = _len(11, _len(1, "input_ids")) + _len(12, _len(1, "hidden"))
    return _int(1, 8) + _len(7, node + _len(2, "qwen3-moe") + initializers + names) + OPSET_17


def c02_onnx() -> bytes:
    return qwen3_model() + c02_nonce(C02_NONCE)


def c02_nonce(nonce: int) -> bytes:
    doc = f"C02 stand-in, nonce {nonce:010d}".encode()
    return b"\x32" + bytes([len(doc)]) + doc


# Reads model.onnx's protobuf and refuses what the ONNX checker refuses here: bytes that are no ModelProto with a
# graph, and a node reading a tensor no graph input, initializer or earlier node defines.
ONNX_CHECKER = """import sys

def varint(data, at):
    value = shift = 0
    while True:
        byte = data[at]; at += 1
        value |= (byte & 0x7F) << shift; shift += 7
        if not byte & 0x80:
            return value, at

def fields(data):
    out, at = [], 0
    while at < len(data):
        key, at = varint(data, at)
        wire = key & 7
        if wire == 0:
            value, at = varint(data, at)
        elif wire == 2:
            size, at = varint(data, at)
            if at + size > len(data):
                raise ValueError("truncated")
            value, at = data[at:at + size], at + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, at = data[at:at + width], at + width
        else:
            raise ValueError("bad wire type")
        out.append((key >> 3, value))
    return out

def names(message, number):
    return [v.decode() for n, v in fields(message) if n == number]

try:
    model = fields(open("model.onnx", "rb").read())
    graph = [v for n, v in model if n == 7][0]
    parts = fields(graph)
    known = set()
    for n, value in parts:
        if n == 11:
            known.update(names(value, 1))
        if n == 5:
            known.update(names(value, 8))
    for n, node in parts:
        if n == 1:
            for tensor in names(node, 1):
                if tensor and tensor not in known:
                    sys.exit(f"node reads undefined tensor {tensor}")
            known.update(names(node, 2))
except (ValueError, IndexError) as error:
    sys.exit(f"not an ONNX model: {error}")
print("ok")
"""


def onnx_checker(root: Path, *, checker: str = ONNX_CHECKER, command: str = "python3 check.py") -> Path:
    """V05's delivery unpacked at `root`: check.py and run.txt, its command."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "check.py").write_text(checker)
    (root / "run.txt").write_text(command + "\n")
    return root


# V01: the compiler container's SBOM giving calcc and TVM at the seed's commits (C03, C04).
COMPILER_COMMITS = [("calcc", "575c2d"), ("tvm", "7aebd1")]


def compiler_sbom(calcc: str = "575c2d9e41", tvm: str | None = "7aebd1c3f0") -> dict:
    packages = [{"SPDXID": "SPDXRef-calcc", "name": "calcc", "versionInfo": f"0.9.0+git.{calcc}"}]
    if tvm is not None:
        packages.append({"SPDXID": "SPDXRef-tvm", "name": "TVM", "versionInfo": "0.16.dev0", "sourceInfo": tvm})
    return {**SPDX, "packages": packages}
