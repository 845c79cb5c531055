"""ONNX deliveries: the original model of V04, and V05's checker run on models calculet makes.

An ONNX file is a protobuf `ModelProto` (onnx/onnx.proto). Its wire format is read here without the onnx
package: the model's `ir_version` (field 1), `graph` (7: its nodes, inputs, outputs and initializers by name)
and `opset_import` (8), whatever the file's size: each message's fields are walked by seeking over their values,
so every byte of the file belongs to a field and a file cut short or padded with garbage is no model. The same few
fields are written to make the models V05's checker is run on.

- `check_onnx_file`: the delivered file is a model with a graph of nodes (`not_onnx` otherwise) and its SHA-256
  begins with the hash the seed records (`hash_mismatch`, both digests named: V04, C02's `316f06…`). The seed
  gives six hexadecimal digits, 24 bits: a file can be made to match them in minutes, so the prefix names which
  model is meant and does not prove the file is it. The file is also held to what the seed says of the model
  (M01-M04) that its initializers' shapes show (`not_the_seed_model`, naming the fact): the embedding of vocabulary
  151936 by hidden 2048, query (32 heads × 128) and KV (4 × 128) projections, a 128-expert router in each of the
  48 layers, experts' FFNs of 768. Only the shapes are read (TensorProto dims), never the weights, which may be
  external data; a file made to those shapes with no weights still passes.
- `check_onnx_checker`: the checker's delivery is a directory (an unpacked tar) holding `run.txt`, its
  command; calculet runs it in the sandbox (`isolated.run_isolated`) in a fresh copy of the directory, once per
  model, the model as `model.onnx`. It must end cleanly on each valid model (`refuses_valid_onnx`) and fail on
  each invalid one with a non-zero exit (`accepts_invalid_onnx`, naming it): bytes that are no model, and a graph
  whose node reads a tensor nothing defines, which ONNX's own checker refuses. A run the sandbox ends (a limit, a
  signal) decides nothing (`checker_failed`). A checker that accepts or refuses everything fails.
  The models are made anew for each check, from a seed it records (`probe_models`): chains of Add, Sub and Mul
  over tensors with random names, run in a random order, the undefined-tensor model the same size as a valid one
  and the truncated one longer than the other valid one, so a checker that knows the models by their bytes, their
  size, their names or their order fails.
"""

import hashlib
import io
import random
import secrets
import shutil
import string
import tempfile
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from acceptance.inspection import Report
from acceptance.inspection.isolated import DEFAULT_LIMITS, run_isolated

COMMAND = "run.txt"
MODEL = "model.onnx"
LIMITS = replace(DEFAULT_LIMITS, wall_seconds=120, memory_bytes=1024**3)
CHUNK = 1024 * 1024
# Bounds on what a model's structure costs to read, whatever its size: fields walked, and a name's length.
MAX_FIELDS = 2_000_000
MAX_TEXT_BYTES = 64 * 1024
MAX_VARINT_BYTES = 10
FLOAT = 1  # TensorProto.FLOAT


class WireError(ValueError):
    pass


# Reading

Span = tuple[int, int]  # where a length-delimited value is in the file: (offset, length)


class _Reader:
    """A protobuf message read where it lies, of any size: each message's fields walked by seeking over their
    values, only the short strings asked for (names, types) read, so a model of gigabytes is read as a few kilobytes
    of structure and every byte of it is accounted for by a field."""

    def __init__(self, stream: IO[bytes]):
        self.stream = stream
        self.walked = 0

    def _varint(self, at: int, end: int) -> tuple[int, int]:
        self.stream.seek(at)
        value = shift = 0
        for used, byte in enumerate(self.stream.read(min(MAX_VARINT_BYTES, end - at)), start=1):
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value, at + used
        raise WireError("a varint runs past the end")

    def fields(self, span: Span) -> list[tuple[int, int | Span]]:
        """The (field number, value) pairs of the message at `span`: varints as ints, everything else as spans."""
        at, end = span[0], span[0] + span[1]
        found: list[tuple[int, int | Span]] = []
        while at < end:
            self.walked += 1
            if self.walked > MAX_FIELDS:
                raise WireError(f"more than {MAX_FIELDS} protobuf fields")
            key, at = self._varint(at, end)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise WireError("field number 0")
            if wire == 0:
                value, at = self._varint(at, end)
                found.append((number, value))
                continue
            if wire in (1, 5):
                length = 8 if wire == 1 else 4
            elif wire == 2:
                length, at = self._varint(at, end)
            else:
                raise WireError(f"wire type {wire} (groups) is not used by ONNX")
            if at + length > end:
                raise WireError("a field runs past the end of its message")
            found.append((number, (at, length)))
            at += length
        return found

    def texts(self, message: list[tuple[int, int | Span]], number: int) -> list[str]:
        spans = [value for n, value in message if n == number and isinstance(value, tuple)]
        if any(length > MAX_TEXT_BYTES for _, length in spans):
            raise WireError(f"a name or type longer than {MAX_TEXT_BYTES} bytes")
        out = []
        for at, length in spans:
            self.stream.seek(at)
            out.append(self.stream.read(length).decode("utf-8", errors="replace"))
        return out

    def varints(self, message: list[tuple[int, int | Span]], number: int) -> list[int]:
        """A repeated integer field's values, each its own field or packed into one (a length-delimited run)."""
        out = []
        for n, value in message:
            if n != number:
                continue
            if isinstance(value, int):
                out.append(value)
                continue
            at, length = value
            if length > MAX_TEXT_BYTES:
                raise WireError(f"a packed list longer than {MAX_TEXT_BYTES} bytes")
            while at < value[0] + length:
                item, at = self._varint(at, value[0] + length)
                out.append(item)
        return out

    def messages(self, message: list[tuple[int, int | Span]], number: int) -> list[list[tuple[int, int | Span]]]:
        return [self.fields(value) for n, value in message if n == number and isinstance(value, tuple)]


@dataclass
class Model:
    ir_version: int | None
    opsets: dict[str, int]
    nodes: list[dict] = field(default_factory=list)  # {"op_type", "inputs", "outputs"}
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    initializers: list[str] = field(default_factory=list)
    shapes: list[tuple[int, ...]] = field(default_factory=list)  # each initializer's dims (TensorProto field 1)


def read_model(data: bytes | IO[bytes]) -> Model:
    """The model's IR version, opsets and graph, from its bytes or a file open for reading; WireError when they
    are no ModelProto with a graph."""
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    size = stream.seek(0, io.SEEK_END)
    reader = _Reader(stream)
    top = reader.fields((0, size))
    ir = [value for n, value in top if n == 1 and isinstance(value, int)]
    opsets: dict[str, int] = {}
    for opset in reader.messages(top, 8):
        versions = [v for n, v in opset if n == 2 and isinstance(v, int)]
        opsets["".join(reader.texts(opset, 1)) or "ai.onnx"] = versions[0] if versions else 0
    graphs = reader.messages(top, 7)
    if not graphs:
        raise WireError("no graph (ModelProto field 7)")
    graph = graphs[0]
    model = Model(ir[0] if ir else None, opsets)
    for node in reader.messages(graph, 1):
        model.nodes.append(
            {
                "op_type": "".join(reader.texts(node, 4)),
                "inputs": reader.texts(node, 1),
                "outputs": reader.texts(node, 2),
            }
        )
    for tensor in reader.messages(graph, 5):
        model.initializers.append("".join(reader.texts(tensor, 8)))
        model.shapes.append(tuple(reader.varints(tensor, 1)))
    model.inputs = ["".join(reader.texts(i, 1)) for i in reader.messages(graph, 11)]
    model.outputs = ["".join(reader.texts(o, 1)) for o in reader.messages(graph, 12)]
    return model


# Writing: the models a checker is run on


def _key(number: int, wire: int) -> bytes:
    return _encode_varint(number << 3 | wire)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _int(number: int, value: int) -> bytes:
    return _key(number, 0) + _encode_varint(value)


def _len(number: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return _key(number, 2) + _encode_varint(len(data)) + data


def _value_info(name: str, shape: tuple[int, ...]) -> bytes:
    dims = b"".join(_len(1, _int(1, size)) for size in shape)
    tensor = _int(1, FLOAT) + _len(2, dims)
    return _len(1, name) + _len(2, _len(1, tensor))


OPSET_17 = _len(8, _len(1, "") + _int(2, 17))  # ModelProto's last field: opset_import, the default domain at 17


def encode_model(nodes: list[tuple[str, list[str], list[str]]], *, inputs: list[str], outputs: list[str]) -> bytes:
    """A ModelProto (IR 8, opset 17) of float [1, 4] tensors: `nodes` as (op_type, inputs, outputs)."""
    graph = b"".join(
        _len(1, b"".join(_len(1, i) for i in ins) + b"".join(_len(2, o) for o in outs) + _len(4, op))
        for op, ins, outs in nodes
    )
    graph += _len(2, "calculet-probe")
    graph += b"".join(_len(11, _value_info(name, (1, 4))) for name in inputs)
    graph += b"".join(_len(12, _value_info(name, (1, 4))) for name in outputs)
    return _int(1, 8) + _len(2, "calculet") + _len(7, graph) + OPSET_17


OPS = ("Add", "Sub", "Mul")
NAME_LENGTH = 8


def _fresh_name(rng: random.Random, taken: set[str]) -> str:
    while (name := "".join(rng.choices(string.ascii_lowercase, k=NAME_LENGTH))) in taken:
        pass
    taken.add(name)
    return name


def _chain(
    rng: random.Random, length: int, taken: set[str]
) -> tuple[list[tuple[str, list[str], list[str]]], list[str]]:
    """`length` binary nodes, each reading the previous one's output and a graph input; and the graph's inputs."""
    inputs = [_fresh_name(rng, taken), _fresh_name(rng, taken)]
    nodes, last = [], inputs[0]
    for _ in range(length):
        out = _fresh_name(rng, taken)
        nodes.append((rng.choice(OPS), [last, rng.choice(inputs)], [out]))
        last = out
    return nodes, inputs


def probe_models(rng: random.Random) -> dict[str, tuple[bytes, str]]:
    """The models a checker is run on, made with `rng`: name -> (bytes, what it is). The `valid` ones must be
    accepted, the others refused. `dangling-input` is `valid` with one tensor a node reads renamed (the same size);
    `truncated` is `valid-longer` cut inside its graph, longer than `valid`."""
    taken: set[str] = set()
    nodes, inputs = _chain(rng, rng.randint(1, 3), taken)
    longer, longer_inputs = _chain(rng, len(nodes) + rng.randint(2, 4), taken)
    valid = encode_model(nodes, inputs=inputs, outputs=nodes[-1][2])
    valid_longer = encode_model(longer, inputs=longer_inputs, outputs=longer[-1][2])
    at = rng.randrange(len(nodes))
    op, reads, writes = nodes[at]
    undefined = _fresh_name(rng, taken)
    dangling_nodes = [*nodes[:at], (op, [reads[0], undefined], writes), *nodes[at + 1 :]]
    dangling = encode_model(dangling_nodes, inputs=inputs, outputs=nodes[-1][2])
    cut = rng.randint(len(valid) + 1, len(valid_longer) - len(OPSET_17) - 1)  # inside the graph (field 7)
    return {
        "valid": (valid, f"a valid model of {len(nodes)} nodes ({', '.join(n[0] for n in nodes)}) at opset 17"),
        "valid-longer": (valid_longer, f"a valid model of {len(longer)} nodes at opset 17"),
        "dangling-input": (
            dangling,
            f"a graph whose {op} (node {at + 1}) reads the tensor {undefined!r}, which nothing defines",
        ),
        "truncated": (valid_longer[:cut], f"the valid model of {len(longer)} nodes cut to {cut} bytes: no ModelProto"),
    }


# Checks


@dataclass(frozen=True)
class ShapeFact:
    """Something the seed says of the original model (M01-M04) that its weights' shapes show: `count`
    initializers (at least one when None) whose dims are `dims` in any order or, `within`, hold them (a stacked
    tensor, the experts' as one)."""

    says: str
    dims: tuple[int, ...]
    count: int | None = None
    within: bool = False

    def matches(self, shape: tuple[int, ...]) -> bool:
        if self.within:
            return not Counter(self.dims) - Counter(shape)
        return sorted(shape) == sorted(self.dims)


SEED_MODEL = (
    ShapeFact("a vocabulary of 151936 by a hidden size of 2048 (M01, M04), the token embedding", (151936, 2048)),
    ShapeFact("32 query heads of 128 by the hidden size of 2048 (M01, M02), a query projection", (4096, 2048)),
    ShapeFact("4 KV heads of 128 by the hidden size of 2048 (M02), a key or value projection", (512, 2048)),
    ShapeFact("48 layers each routing to 128 experts by the hidden size of 2048 (M01, M03)", (128, 2048), count=48),
    ShapeFact("experts' FFNs of 768 by the hidden size of 2048 (M03)", (768, 2048), within=True),
)


def _check_seed_model(report: Report, model: Model) -> None:
    """Six hexadecimal digits are forged in minutes: the file's weights must also have the seed's model's shapes."""
    for fact in SEED_MODEL:
        found = sum(fact.matches(shape) for shape in model.shapes)
        if (found >= 1) if fact.count is None else (found == fact.count):
            continue
        shaped = " × ".join(str(size) for size in fact.dims)
        expected = "at least one initializer" if fact.count is None else f"{fact.count} initializers"
        report.add(
            "not_the_seed_model",
            f"the seed's model has {fact.says}, which its weights show as {expected} "
            f"{'holding the dims' if fact.within else 'shaped'} {shaped}; the file has {found}: it is another model",
            expected=expected,
            dims=list(fact.dims),
            found=found,
        )


def _sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def check_onnx_file(path: Path, *, sha256_prefix: str) -> Report:
    """V04: the delivered file is an ONNX model whose SHA-256 begins with `sha256_prefix` (the seed's) and whose
    weights have the shapes of the seed's model (`SEED_MODEL`)."""
    report = Report()
    path = Path(path)
    digest = _sha256(path)
    report.checked.update(sha256=digest, expected_prefix=sha256_prefix, size=path.stat().st_size)
    if not digest.startswith(sha256_prefix.lower()):
        report.add(
            "hash_mismatch",
            f"the file's SHA-256 is {digest}, not the {sha256_prefix}… the seed records for the original ONNX (C02): "
            "it is another model",
            actual=digest,
            expected_prefix=sha256_prefix,
        )
    try:
        with path.open("rb") as stream:
            model = read_model(stream)
    except WireError as error:
        report.add("not_onnx", f"the file is not an ONNX model (a ModelProto with a graph): {error}")
        return report
    report.checked.update(
        ir_version=model.ir_version, opsets=model.opsets, nodes=len(model.nodes), initializers=len(model.shapes)
    )
    if model.ir_version is None or not model.opsets:
        report.add("not_onnx", "the file names no IR version or no opset: not an ONNX model")
    elif not model.nodes or not all(node["op_type"] for node in model.nodes):
        report.add("not_onnx", "the file's graph has no node, or a node with no op_type: not the model compiled")
    else:
        _check_seed_model(report, model)
    return report


def check_onnx_checker(bundle: Path, *, limits=LIMITS, seed: int | None = None) -> Report:
    """V05: the vendor's checker, run on each of `probe_models()` (made from `seed`, a random one when None), accepts
    the valid ones and refuses the others."""
    report = Report()
    bundle = Path(bundle)
    if not (bundle / COMMAND).is_file():
        report.add("delivery_incomplete", f"the checker's delivery has no {COMMAND} (its command)")
        return report
    command = (bundle / COMMAND).read_text(encoding="utf-8", errors="replace").strip()
    seed = secrets.randbits(64) if seed is None else seed
    rng = random.Random(seed)
    models = list(probe_models(rng).items())
    rng.shuffle(models)
    report.checked.update(command=command, seed=seed, runs=[])
    for name, (data, description) in models:
        scratch = Path(tempfile.mkdtemp(prefix=f"calculet-onnx-{name}-"))
        try:
            workdir = scratch / "check"
            shutil.copytree(bundle, workdir, symlinks=True)
            (workdir / MODEL).write_bytes(data)
            ran = run_isolated(["/bin/sh", "-c", command], workdir=workdir, limits=limits)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        outcome = ran.outcome
        accepted = outcome.clean_exit
        # A refusal is the checker's own verdict: a non-zero exit, not a limit the sandbox ended it on.
        refused = outcome.limit_hit is None and outcome.signal_number is None and outcome.exit_code not in (0, None)
        report.checked["runs"].append({"model": name, "accepted": accepted, **ran.record})
        if not accepted and not refused:
            report.add(
                "checker_failed",
                f"the checker did not decide on {description}: {outcome.reason}",
                model=name,
                output_tail=ran.output_tail,
            )
        elif name.startswith("valid") and refused:
            report.add(
                "refuses_valid_onnx",
                f"the checker refuses {description} (exit {outcome.exit_code})",
                model=name,
                output_tail=ran.output_tail,
            )
        elif not name.startswith("valid") and accepted:
            report.add("accepts_invalid_onnx", f"the checker accepts {description}", model=name)
    return report
