"""Whether the files a package's metadata names are there, intact, and hold what the model needs."""

import re

from npu_sim.calbin.check_meta import layout_chiplets
from npu_sim.calbin.findings import CalbinError, Finding
from npu_sim.calbin.goldens import GoldenError, golden_problems, read_golden
from npu_sim.calbin.layout import CHECKSUMS, GOLDEN, MODEL_MEMORY, PARAM_TABLE, VENDOR_FORM
from npu_sim.calbin.metadata import PackageMeta
from npu_sim.calbin.package import Package, unsafe_path_reason
from npu_sim.calbin.params import placements, stored_tensors

_CHECKSUM_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")


def read_checksums(package: Package) -> tuple[dict[str, str], list[Finding]]:
    """SHA256SUMS as `sha256sum` writes it: `<64 hex digits>  <path>` per line."""
    if not package.has(CHECKSUMS):
        return {}, [Finding("file_missing", "error", CHECKSUMS, f"{CHECKSUMS} is missing")]
    digests, findings = {}, []
    for number, line in enumerate(package.read(CHECKSUMS).decode("utf-8", "replace").splitlines(), start=1):
        if not line.strip():
            continue
        match = _CHECKSUM_LINE.fullmatch(line.strip())
        if match is None:
            findings.append(
                Finding("digest_invalid", "error", f"{CHECKSUMS}:{number}", f"cannot read {line!r}", number)
            )
        else:
            digests[match.group(2)] = match.group(1)
    return digests, findings


def check_files(package: Package, meta: PackageMeta) -> list[Finding]:
    if meta.form == VENDOR_FORM:
        return _check_vendor_files(package, meta)
    digests, findings = read_checksums(package)
    findings += _check_digests(package, digests)
    for name in package.names():
        if name != CHECKSUMS and name not in digests:
            findings.append(Finding("file_unlisted", "warning", name, f"{name} has no sha256 in {CHECKSUMS}"))
    findings += _check_blocks(package, meta)
    findings += _check_param_table(meta)
    findings += _check_golden(package, meta)
    return findings


def _check_digests(package: Package, digests: dict[str, str]) -> list[Finding]:
    findings = []
    for name, digest in sorted(digests.items()):
        reason = unsafe_path_reason(name)
        if reason:
            findings.append(Finding("path_unsafe", "error", CHECKSUMS, f"{name!r}: {reason}"))
            continue
        try:
            if not package.has(name):
                findings.append(Finding("file_missing", "error", name, f"{name} is listed in {CHECKSUMS} but missing"))
            elif package.sha256(name) != digest:
                findings.append(
                    Finding("digest_mismatch", "error", name, f"{name} does not match its sha256 in {CHECKSUMS}")
                )
        except CalbinError as error:
            findings.append(Finding(error.code, "error", name, str(error)))
    return findings


def _check_vendor_files(package: Package, meta: PackageMeta) -> list[Finding]:
    """The vendor's own package: its parameter blocks are there at their declared sizes. It has no parameter
    table and no goldens (the vendor delivers its golden apart), and a SHA256SUMS only if the vendor adds one;
    without it the files rest on the artifact's own digest."""
    findings = _check_blocks(package, meta)
    if package.has(CHECKSUMS):
        digests, problems = read_checksums(package)
        findings += problems + _check_digests(package, digests)
    else:
        findings.append(
            Finding(
                "checksums_absent",
                "warning",
                CHECKSUMS,
                f"no {CHECKSUMS}: the files are vouched for only by the artifact's own sha256",
            )
        )
    return findings


def _check_blocks(package: Package, meta: PackageMeta) -> list[Finding]:
    findings = []
    for block in meta.blocks:
        key = f"{MODEL_MEMORY}:param_blk{block.index}.file"
        reason = unsafe_path_reason(block.file)
        if reason:
            findings.append(Finding("path_unsafe", "error", key, f"{block.file!r}: {reason}"))
        elif not package.has(block.file):
            findings.append(Finding("file_missing", "error", key, f"{block.file} is missing"))
        elif package.size(block.file) != block.size:
            findings.append(
                Finding("param_block_size", "error", key, f"{block.file} is not the {block.size} bytes the file says")
            )
    return findings


def _check_param_table(meta: PackageMeta) -> list[Finding]:
    """Every tensor of the model is in the blocks the layout puts it in, within the block, without overlap."""
    config, weight_dtype, layout = meta.config, meta.dtypes.get("weight"), meta.layout
    if config is None or weight_dtype not in ("f32", "s8") or layout_chiplets(layout, meta.chip_affinity) is None:
        return []
    assert layout is not None and weight_dtype is not None
    findings = []
    expected = stored_tensors(config, weight_dtype)
    wanted = {
        (p.block, p.name, str(p.part))
        for p in placements(layout, {n: s for n, (s, _) in expected.items()}, config.layers, meta.chip_affinity or 0)
    }
    sizes = {b.index: b.size for b in meta.blocks}
    spans: dict[int, list[tuple[int, int, str]]] = {}
    found = set()

    def error(code: str, line: int, message: str) -> None:
        findings.append(Finding(code, "error", f"{PARAM_TABLE}:{line}", message, line))

    for entry in meta.params:
        key = (entry.block, entry.name, str(entry.part))
        found.add(key)
        if key not in wanted:
            where = "is not a tensor of this model" if entry.name not in expected else f"is not where {layout} puts it"
            error("param_placement", entry.line, f"{entry.name} part {entry.part} in param_blk{entry.block} {where}")
            continue
        shape, dtype = expected[entry.name]
        if entry.dtype != dtype or entry.shape != entry.part.shape_of(shape):
            error(
                "param_shape_mismatch",
                entry.line,
                f"{entry.name} part {entry.part} should be {dtype}{list(entry.part.shape_of(shape))}, "
                f"not {entry.dtype}{list(entry.shape)}",
            )
            continue
        if entry.block not in sizes or entry.offset < 0 or entry.offset + entry.nbytes > sizes[entry.block]:
            error("param_out_of_block", entry.line, f"{entry.name} does not lie inside param_blk{entry.block}")
            continue
        spans.setdefault(entry.block, []).append((entry.offset, entry.offset + entry.nbytes, entry.name))
    for block, ranges in spans.items():
        ranges.sort()
        for (_, end, first), (start, _, second) in zip(ranges, ranges[1:], strict=False):
            if start < end:
                findings.append(
                    Finding("param_overlap", "error", PARAM_TABLE, f"{first} and {second} overlap in param_blk{block}")
                )
    for block, name, part in sorted(wanted - found):
        findings.append(
            Finding("param_missing", "error", PARAM_TABLE, f"{name} part {part} is missing from param_blk{block}")
        )
    return findings


def _check_golden(package: Package, meta: PackageMeta) -> list[Finding]:
    if not package.has(GOLDEN):
        return [Finding("golden_missing", "error", GOLDEN, f"{GOLDEN} is missing: a package carries its goldens")]
    try:
        golden = read_golden(package.read(GOLDEN), "package")
    except GoldenError as error:
        return [Finding("golden_invalid", "error", GOLDEN, str(error))]
    if meta.config is None:
        return []
    return [
        Finding("golden_invalid", "error", GOLDEN, p)
        for p in golden_problems(golden, meta.config.vocab, meta.config.max_seq_len)
    ]
