"""An OCI image archive (`docker save --format oci`, `skopeo copy oci-archive:`, `podman save`), verified
offline: the layout, the index, every manifest, config and layer blob present with the digest and size
its descriptor names, each gzip or plain layer unpacking to the diff_id its image config names, an SBOM
and a licence.

Blobs are hashed as they stream out of the tar, a megabyte at a time; only the JSON documents (index,
manifests, configs, SBOM) are read whole, each up to a bound. Where the SBOM is:

- a file of the archive outside `blobs/` (`*.spdx.json`, `*.cdx.json`, `sbom.json`, `bom.json`);
- a blob whose descriptor's media type or artifact type is SPDX or CycloneDX JSON (an attached artifact
  in the layout, a referrer listed in the index);
- or a separate file passed in as `sbom` (an artifact attached in the registry and pulled apart).

With `components` (V07: the manifest of passes, codegen, C oplib and kernels), the SBOM must also describe
what the image holds: every file it lists with a SHA-256 (SPDX `files` with their package from `hasFiles` or a
CONTAINS relationship; CycloneDX components of type `file`, or a component's own `file` components) is in the
image's filesystem, after each layer's whiteouts, with that digest; every compiled file of the image (ELF, or an
`ar` archive of objects) is one of them; every component carries a version. Any other is `sbom_mismatch` naming
the component and the file (`sbom_no_files` when it lists none, `sbom_unversioned`).

With `commits` (V01: the compiler container, `[("calcc", "575c2d"), ("tvm", "7aebd1")]` from the seed's C03 and
C04), the image must hold the compiler, a program named as the first component on its PATH (each image config's
`Env` PATH, DEFAULT_SEARCH_PATH where it sets none): a regular file with an execute bit, an ELF or a script (`#!`),
or a link (symbolic, or hard) that resolves inside the image to one, links in the directories on the way followed
too (`compiler_not_in_image`, naming each file of that name that is none: not a program, a link that dangles, leads
out of the image or loops, or off the PATH); and its SBOM must give each component at that commit: every package or
component of that name (any case; CycloneDX `file` components aside) holds a hexadecimal commit beginning with the
prefix in a field that says what was built — SPDX `versionInfo`, `sourceInfo`, `downloadLocation` or an external
reference's locator, CycloneDX `version`, `purl`, a `pedigree` commit's `uid` or `url`, or a `vcs` external
reference's `url` — not in a comment, a description, a checksum or a nested component (`commit_missing` when no
component has the name, `commit_mismatch` naming what it gives instead).

SPDX 2.x (`spdxVersion` "SPDX-2.*") and CycloneDX JSON (`bomFormat` "CycloneDX") are accepted. The
licence is a file of the archive outside `blobs/` named LICENSE, LICENCE, COPYING or NOTICE (any case,
any extension), or a blob whose descriptor titles it so (`org.opencontainers.image.title`).
"""

import hashlib
import json
import re
import tarfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, NamedTuple

from acceptance.inspection import Report

CHUNK = 1024 * 1024
MAX_JSON_BYTES = 8 * 1024 * 1024
MAX_SBOM_BYTES = 64 * 1024 * 1024
MAX_MEMBERS = 100_000
MAX_INDEX_DEPTH = 4
INDEX_MEDIA_TYPES = {
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
}
MANIFEST_MEDIA_TYPES = {
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
}
IMAGE_CONFIG_MEDIA_TYPES = {
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.docker.container.image.v1+json",
}
SBOM_MEDIA_TYPES = {"application/spdx+json", "application/vnd.cyclonedx+json", "application/vnd.syft+json"}
SBOM_FILE = re.compile(r"(\.spdx\.json|\.cdx\.json|^sbom\.json|^bom\.json)$", re.IGNORECASE)
LICENCE_FILE = re.compile(r"^(licen[cs]e|copying|notice)([._-].*)?$", re.IGNORECASE)
DIGEST = re.compile(r"^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$")
TITLE = "org.opencontainers.image.title"


@dataclass
class ImageReport(Report):
    blobs: dict[str, dict] = field(default_factory=dict)  # digest -> {"size", "media_type", "verified"}
    sbom: dict[str, Any] | None = None
    licence: str | None = None
    # Each image manifest's config and filesystem layers by digest: what a build of the image must write.
    images: list[dict[str, Any]] = field(default_factory=list)
    sbom_document: Any = None  # the SBOM as read, for the component comparison (not part of the evidence)
    # The directories a command is looked up in: each image config's Env PATH, the usual ones where it has none.
    search_path: list[str] = field(default_factory=list)


class ImageFile(NamedTuple):
    sha256: str
    compiled: bool  # ELF or an `ar` archive
    runnable: bool  # a program: an execute bit, and an ELF or a script


def check_oci_archive(
    path: Path, *, sbom: Path | None = None, components: bool = False, commits: Sequence[Sequence[str]] = ()
) -> ImageReport:
    report = ImageReport()
    path = Path(path)
    report.checked["archive"] = {"name": path.name, "size": path.stat().st_size if path.is_file() else None}
    if not path.is_file():
        report.add("archive_missing", f"the image archive {path.name} does not exist")
        return report
    try:
        with tarfile.open(path, "r:*") as archive:
            inspection = _Inspection(archive, report)
            inspection.run()
            if sbom is not None:
                _check_sbom_bytes(_read_bounded_file(Path(sbom), report), f"attached {Path(sbom).name}", report)
            files, links = inspection.image_files() if components or commits else ({}, {})
            if components and report.sbom_document is not None:
                _compare_components(report, report.sbom_document, files)
            if commits:
                _check_commits(report, commits, files, links)
    except (tarfile.TarError, EOFError, OSError) as error:
        report.add("archive_unreadable", f"{path.name} is not a readable tar archive: {error}")
        return report
    if report.sbom is None and not any(f.code.startswith("sbom") for f in report.findings):
        report.add("sbom_missing", "no SBOM (SPDX or CycloneDX JSON) in the archive or attached to it")
    if report.licence is None:
        report.add("licence_missing", "no licence file (LICENSE, LICENCE, COPYING, NOTICE) in the archive")
    # What a passing image rests on, named in its evidence.
    report.checked.update(sbom=report.sbom, licence=report.licence)
    return report


class _Inspection:
    def __init__(self, archive: tarfile.TarFile, report: ImageReport):
        self.archive = archive
        self.report = report
        self.members: dict[str, tarfile.TarInfo] = {}

    def run(self) -> None:
        for count, member in enumerate(self.archive):
            if count >= MAX_MEMBERS:
                self.report.add("archive_too_many_members", f"more than {MAX_MEMBERS} members: not an image layout")
                return
            if member.isfile():
                self.members[str(PurePosixPath(member.name.removeprefix("./")))] = member
        files = sorted(name for name in self.members if not name.startswith("blobs/"))
        self.report.checked["files"] = files
        self._check_layout()
        for name in files:
            basename = PurePosixPath(name).name
            if SBOM_FILE.search(basename) and self.report.sbom is None:
                _check_sbom_bytes(self._read_member(name, MAX_SBOM_BYTES, "sbom"), name, self.report)
            if LICENCE_FILE.match(basename) and self.report.licence is None:
                self.report.licence = name
        index = self._read_json("index.json", "index")
        if index is not None:
            self._walk_index(index, "index.json", depth=0)

    def _check_layout(self) -> None:
        layout = self._read_json("oci-layout", "layout")
        if layout is None:
            return
        version = layout.get("imageLayoutVersion") if isinstance(layout, dict) else None
        self.report.checked["layout_version"] = version
        if version != "1.0.0":
            self.report.add("layout_invalid", f"oci-layout's imageLayoutVersion is {version!r}, not '1.0.0'")

    def _read_member(self, name: str, limit: int, what: str) -> bytes | None:
        member = self.members.get(name)
        if member is None:
            return None
        if member.size > limit:
            self.report.add(f"{what}_too_large", f"{name} is {member.size} bytes, more than {limit}", path=name)
            return None
        stream = self.archive.extractfile(member)
        return stream.read() if stream is not None else None

    def _read_json(self, name: str, what: str) -> Any:
        if name not in self.members:
            self.report.add(f"{what}_missing", f"{name} is missing from the archive", path=name)
            return None
        data = self._read_member(name, MAX_JSON_BYTES, what)
        if data is None:
            return None
        try:
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            self.report.add(f"{what}_invalid", f"{name} is not JSON: {error}", path=name)
            return None

    def _walk_index(self, index: Any, where: str, depth: int) -> None:
        manifests = index.get("manifests") if isinstance(index, dict) else None
        if not isinstance(manifests, list) or not manifests or index.get("schemaVersion") != 2:
            self.report.add("index_invalid", f"{where} is not an image index (schemaVersion 2, manifests)", path=where)
            return
        self.report.checked.setdefault("manifests", [])
        for descriptor in manifests:
            document = self._blob_json(descriptor, f"a manifest of {where}", "manifest")
            if document is None:
                continue
            media_type = descriptor.get("mediaType") or document.get("mediaType")
            if media_type in INDEX_MEDIA_TYPES:
                if depth + 1 >= MAX_INDEX_DEPTH:
                    self.report.add("index_too_deep", f"indexes nest more than {MAX_INDEX_DEPTH} deep", path=where)
                else:
                    self._walk_index(document, descriptor["digest"], depth + 1)
                continue
            self.report.checked["manifests"].append(descriptor["digest"])
            self._check_manifest(document, descriptor)

    def _check_manifest(self, manifest: Any, descriptor: dict) -> None:
        where = descriptor["digest"]
        config, layers = manifest.get("config"), manifest.get("layers")
        if manifest.get("schemaVersion") != 2 or not isinstance(config, dict) or not isinstance(layers, list):
            self.report.add(
                "manifest_invalid", f"manifest {where} has no schemaVersion 2, config and layers", path=where
            )
            return
        artifact = manifest.get("artifactType") or descriptor.get("artifactType") or config.get("mediaType")
        is_sbom_artifact = artifact in SBOM_MEDIA_TYPES
        config_document = self._blob_json(config, f"the config of {where}", "config")
        if config_document is not None and not isinstance(config_document, dict):
            self.report.add("config_invalid", f"the config of {where} is not a JSON object", path=config["digest"])
        verified = []
        for layer in layers:
            if not self._verify_blob(layer, f"a layer of {where}"):
                continue
            verified.append(layer)
            title = (layer.get("annotations") or {}).get(TITLE, "")
            if layer.get("mediaType") in SBOM_MEDIA_TYPES or (is_sbom_artifact and self.report.sbom is None):
                name = _blob_name(layer["digest"])
                _check_sbom_bytes(
                    self._read_member(name, MAX_SBOM_BYTES, "sbom"), f"blob {layer['digest']}", self.report
                )
            if title and LICENCE_FILE.match(PurePosixPath(title).name) and self.report.licence is None:
                self.report.licence = f"{title} ({layer['digest']})"
        if isinstance(config_document, dict) and config.get("mediaType") in IMAGE_CONFIG_MEDIA_TYPES:
            self._check_diff_ids(config_document, layers, verified, where)
            for folder in _search_path(config_document):
                if folder not in self.report.search_path:
                    self.report.search_path.append(folder)
            self.report.images.append(
                {
                    "manifest": where,
                    "config": config["digest"],
                    "layers": [layer["digest"] for layer in verified if _is_filesystem_layer(layer)],
                }
            )

    def _check_diff_ids(self, config: dict, layers: list, verified: list, where: str) -> None:
        """Each layer unpacks to the tar its config's rootfs.diff_ids names (what `docker load` checks)."""
        layers = [layer for layer in layers if _is_filesystem_layer(layer)]
        diff_ids = (config.get("rootfs") or {}).get("diff_ids")
        if not isinstance(diff_ids, list) or len(diff_ids) != len(layers):
            self.report.add(
                "config_invalid",
                f"the config of {where} lists {len(diff_ids) if isinstance(diff_ids, list) else 'no'} diff_ids "
                f"for {len(layers)} layers",
                path=where,
            )
            return
        unchecked = self.report.checked.setdefault("diff_ids_not_checked", [])
        for layer, diff_id in zip(layers, diff_ids, strict=True):
            if layer not in verified:
                continue
            media_type = str(layer.get("mediaType", ""))
            if media_type.endswith(("tar+gzip", "tar.gzip")):
                stream = self.archive.extractfile(self.members[_blob_name(layer["digest"])])
                actual = "sha256:" + _hash_stream(stream, "sha256", gunzip=True)
            elif media_type.endswith((".tar", "layer.v1.tar")):
                actual = layer["digest"]
            else:
                unchecked.append(layer["digest"])  # zstd and foreign layers: their digest was checked
                continue
            if actual != diff_id:
                self.report.add(
                    "diff_id_mismatch",
                    f"layer {layer['digest']} of {where} unpacks to {actual}, its config says {diff_id}",
                    digest=layer["digest"],
                    actual=actual,
                    expected=diff_id,
                )

    def _verify_blob(self, descriptor: Any, what: str) -> bool:
        """The blob a descriptor names is in the archive with its size and digest."""
        if not isinstance(descriptor, dict) or not DIGEST.match(str(descriptor.get("digest", ""))):
            self.report.add("descriptor_invalid", f"{what} has no valid digest: {str(descriptor)[:200]}")
            return False
        digest, size = descriptor["digest"], descriptor.get("size")
        record = self.report.blobs.setdefault(
            digest, {"size": size, "media_type": descriptor.get("mediaType"), "verified": False}
        )
        if record["verified"]:
            return True
        name = _blob_name(digest)
        member = self.members.get(name)
        if member is None:
            self.report.add("blob_missing", f"{what}: blob {digest} is missing", digest=digest)
            return False
        if size != member.size:
            self.report.add(
                "size_mismatch",
                f"{what}: blob {digest} is {member.size} bytes, its descriptor says {size}",
                digest=digest,
                size=member.size,
                expected=size,
            )
            return False
        algorithm, expected = digest.split(":")
        actual = _hash_stream(self.archive.extractfile(member), algorithm)
        if actual != expected:
            self.report.add(
                "digest_mismatch",
                f"{what}: blob {digest} hashes to {algorithm}:{actual}",
                digest=digest,
                actual=f"{algorithm}:{actual}",
            )
            return False
        record["verified"] = True
        return True

    def image_files(self) -> tuple[dict[str, ImageFile], dict[str, str]]:
        """Every regular file of the images' filesystems, layer over layer with their whiteouts applied; and
        every link (symbolic, or hard as a link to the path it names) with its target."""
        files: dict[str, ImageFile] = {}
        links: dict[str, str] = {}
        for image in self.report.images:
            for digest in image["layers"]:
                record = self.report.blobs.get(digest) or {}
                member = self.members.get(_blob_name(digest))
                if not record.get("verified") or member is None:
                    continue
                try:
                    with tarfile.open(fileobj=self.archive.extractfile(member), mode="r|*") as layer:
                        for entry in layer:
                            _apply_layer_entry(files, links, layer, entry)
                except (tarfile.TarError, EOFError, zlib.error) as error:
                    # A zstd or foreign layer: its files cannot be compared with the SBOM, so it does not pass.
                    self.report.add("layer_unreadable", f"layer {digest} is not a tar this check reads: {error}")
        return files, links

    def _blob_json(self, descriptor: Any, what: str, kind: str) -> Any:
        if not self._verify_blob(descriptor, what):
            return None
        document = self._read_json(_blob_name(descriptor["digest"]), kind)
        if document is not None and not isinstance(document, dict):
            self.report.add(f"{kind}_invalid", f"{what} is not a JSON object", path=descriptor["digest"])
            return None
        return document


def _is_filesystem_layer(descriptor: dict) -> bool:
    media_type = str(descriptor.get("mediaType", ""))
    return ".image.layer." in media_type or ".image.rootfs." in media_type


def _blob_name(digest: str) -> str:
    algorithm, hexdigest = digest.split(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _hash_stream(stream: IO[bytes] | None, algorithm: str, *, gunzip: bool = False) -> str:
    """The digest of the stream (of what it unzips to, with `gunzip`), a chunk at a time."""
    hasher = hashlib.new(algorithm)
    unzip = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16) if gunzip else None
    if stream is not None:
        while chunk := stream.read(CHUNK):
            if unzip is None:
                hasher.update(chunk)
                continue
            while chunk:
                hasher.update(unzip.decompress(chunk, CHUNK))
                chunk = unzip.unconsumed_tail
    return hasher.hexdigest()


def _read_bounded_file(path: Path, report: Report) -> bytes | None:
    if not path.is_file():
        report.add("sbom_missing", f"the attached SBOM {path.name} does not exist")
        return None
    if path.stat().st_size > MAX_SBOM_BYTES:
        report.add("sbom_too_large", f"the attached SBOM {path.name} is larger than {MAX_SBOM_BYTES} bytes")
        return None
    return path.read_bytes()


def _check_sbom_bytes(data: bytes | None, where: str, report: ImageReport) -> None:
    if data is None:
        return
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        report.add("sbom_invalid", f"the SBOM {where} is not JSON: {error}", where=where)
        return
    described = _sbom_format(document)
    if described is None:
        report.add("sbom_invalid", f"the SBOM {where} is neither SPDX 2.x nor CycloneDX JSON", where=where)
        return
    sbom_format, version, packages = described
    report.sbom = {"where": where, "format": sbom_format, "version": version, "packages": packages}
    report.sbom_document = document


def _sbom_format(document: Any) -> tuple[str, str, int] | None:
    if not isinstance(document, dict):
        return None
    spdx = document.get("spdxVersion")
    if isinstance(spdx, str) and spdx.startswith("SPDX-2.") and isinstance(document.get("packages", []), list):
        return "SPDX", spdx.removeprefix("SPDX-"), len(document.get("packages", []))
    spec = document.get("specVersion")
    if document.get("bomFormat") == "CycloneDX" and isinstance(spec, str):
        components = document.get("components", [])
        return "CycloneDX", spec, len(components) if isinstance(components, list) else 0
    return None


WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
COMPILED_MAGIC = (b"\x7fELF", b"!<arch>\n")
SCRIPT_MAGIC = b"#!"


def _image_path(name: str) -> str:
    return str(PurePosixPath("/" + name.removeprefix("./")))[1:]


def _apply_layer_entry(
    files: dict[str, ImageFile], links: dict[str, str], layer: tarfile.TarFile, entry: tarfile.TarInfo
) -> None:
    """One entry of a layer over the files below it: a whiteout removes, a regular file or a link replaces."""
    path = _image_path(entry.name)
    folder, name = PurePosixPath(path).parent, PurePosixPath(path).name
    if name == OPAQUE or name.startswith(WHITEOUT):
        gone = str(folder) if name == OPAQUE else str(folder / name.removeprefix(WHITEOUT))
        prefix = "" if gone == "." else gone + "/"
        for held in (files, links):
            for known in [known for known in held if known == gone or known.startswith(prefix)]:
                del held[known]
        return
    links.pop(path, None)
    if entry.issym() or entry.islnk():
        files.pop(path, None)
        # A hard link names a path of the layer from its root.
        links[path] = entry.linkname if entry.issym() else "/" + _image_path(entry.linkname)
        return
    if not entry.isfile():
        files.pop(path, None)
        return
    stream = layer.extractfile(entry)
    head = stream.read(8) if stream is not None else b""
    hasher = hashlib.sha256(head)
    while stream is not None and (chunk := stream.read(CHUNK)):
        hasher.update(chunk)
    runnable = bool(entry.mode & 0o111) and head.startswith((*COMPILED_MAGIC[:1], SCRIPT_MAGIC))
    files[path] = ImageFile(hasher.hexdigest(), head.startswith(COMPILED_MAGIC), runnable)


def _sbom_files(document: dict) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(component, path, sha256) of each file the SBOM lists with a SHA-256, and the components without a
    version."""
    listed: list[tuple[str, str, str]] = []
    unversioned: list[str] = []
    if "spdxVersion" in document:
        packages = [p for p in document.get("packages") or [] if isinstance(p, dict)]
        owner: dict[str, str] = {}
        for package in packages:
            name = str(package.get("name") or package.get("SPDXID") or "?")
            if not package.get("versionInfo"):
                unversioned.append(name)
            for file_id in package.get("hasFiles") or []:
                owner[str(file_id)] = name
        names = {str(p.get("SPDXID")): str(p.get("name") or p.get("SPDXID")) for p in packages}
        for relation in document.get("relationships") or []:
            contains = isinstance(relation, dict) and relation.get("relationshipType") == "CONTAINS"
            if contains and str(relation.get("spdxElementId")) in names:
                owner[str(relation.get("relatedSpdxElement"))] = names[str(relation.get("spdxElementId"))]
        for entry in document.get("files") or []:
            if not isinstance(entry, dict):
                continue
            digests = {
                str(c.get("algorithm", "")).upper(): str(c.get("checksumValue", "")).lower()
                for c in entry.get("checksums") or []
                if isinstance(c, dict)
            }
            if "SHA256" in digests:
                path = _image_path(str(entry.get("fileName", "")))
                listed.append((owner.get(str(entry.get("SPDXID")), path), path, digests["SHA256"]))
        return listed, unversioned

    def walk(components: Any, parent: str) -> None:
        for component in components if isinstance(components, list) else []:
            if not isinstance(component, dict):
                continue
            name = str(component.get("name") or "?")
            if component.get("type") == "file":
                digests = {
                    str(h.get("alg", "")).upper(): str(h.get("content", "")).lower()
                    for h in component.get("hashes") or []
                    if isinstance(h, dict)
                }
                if "SHA-256" in digests:
                    listed.append((parent or _image_path(name), _image_path(name), digests["SHA-256"]))
                continue
            if not component.get("version"):
                unversioned.append(name)
            walk(component.get("components"), name)

    walk(document.get("components"), "")
    return listed, unversioned


def _compare_components(report: ImageReport, document: dict, image: dict[str, ImageFile]) -> None:
    """The SBOM's components against the image's files, by path and SHA-256 (see the module's docstring)."""
    listed, unversioned = _sbom_files(document)
    report.checked["sbom_files"] = len(listed)
    for component in unversioned:
        report.add("sbom_unversioned", f"SBOM component {component} has no version", component=component)
    if not listed:
        report.add("sbom_no_files", "the SBOM lists no file with its SHA-256: nothing ties its components to the image")
        return
    for component, path, digest in listed:
        found = image.get(path)
        if found is None:
            report.add(
                "sbom_mismatch",
                f"SBOM component {component}: {path} is not in the image (missing)",
                component=component,
                path=path,
            )
        elif found.sha256 != digest:
            report.add(
                "sbom_mismatch",
                f"SBOM component {component}: {path} in the image is sha256:{found.sha256}, the SBOM says "
                f"sha256:{digest}",
                component=component,
                path=path,
                actual=found.sha256,
                expected=digest,
            )
    known = {path for _component, path, _digest in listed}
    for path, file in sorted(image.items()):
        if file.compiled and path not in known:
            report.add(
                "sbom_mismatch",
                f"{path} (compiled, sha256:{file.sha256}) is in the image but in no SBOM component (extra)",
                path=path,
                actual=file.sha256,
            )


COMMIT = re.compile(r"[0-9a-f]{6,64}", re.IGNORECASE)


# The fields of a package (SPDX) or component (CycloneDX) that say what was built, where a commit counts.
SPDX_COMMIT_FIELDS = ("versionInfo", "sourceInfo", "downloadLocation")
CYCLONEDX_COMMIT_FIELDS = ("version", "purl")


def _commit_texts(record: dict) -> list[str]:
    """What the record says it was built from: its version, source and locators, not its comments, descriptions,
    checksums or nested components."""
    texts = [record.get(key) for key in (*SPDX_COMMIT_FIELDS, *CYCLONEDX_COMMIT_FIELDS)]
    texts += [ref.get("referenceLocator") for ref in _dicts(record.get("externalRefs"))]
    pedigree = record.get("pedigree")
    commits = pedigree.get("commits") if isinstance(pedigree, dict) else None
    texts += [commit.get(key) for commit in _dicts(commits) for key in ("uid", "url")]
    texts += [ref.get("url") for ref in _dicts(record.get("externalReferences")) if ref.get("type") == "vcs"]
    return [text for text in texts if isinstance(text, str)]


def _dicts(node: Any) -> list[dict]:
    return [item for item in node if isinstance(item, dict)] if isinstance(node, list) else []


def _sbom_component_records(document: Any) -> dict[str, list[dict]]:
    """The SBOM's packages (SPDX) or components (CycloneDX, nested too, files aside) by lower-case name."""
    records: dict[str, list[dict]] = {}
    if not isinstance(document, dict):
        return records
    stack = list(document.get("packages") or []) + list(document.get("components") or [])
    while stack:
        record = stack.pop()
        if not isinstance(record, dict):
            continue
        if record.get("type") != "file":
            records.setdefault(str(record.get("name", "")).lower(), []).append(record)
        stack.extend(record.get("components") or [])
    return records


# Where a shell looks for a command when the image config sets no PATH (Docker's default).
DEFAULT_SEARCH_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
MAX_LINKS_FOLLOWED = 40  # as Linux: more is a loop


def _search_path(config: dict) -> list[str]:
    settings = config.get("config")
    env = settings.get("Env") if isinstance(settings, dict) else None
    paths = [entry[5:] for entry in env or [] if isinstance(entry, str) and entry.startswith("PATH=")]
    if not paths:
        return list(DEFAULT_SEARCH_PATH)
    return [folder for folder in paths[-1].split(":") if folder.startswith("/")]


def _resolve(path: str, links: dict[str, str]) -> str | None:
    """`path` (from the image's root) with each link in it followed inside the image; None when a link leads out
    of it (`..` past its root) or links loop."""
    parts = [part for part in PurePosixPath(path).parts if part != "/"]
    resolved: list[str] = []
    followed = 0
    while parts:
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                return None
            resolved.pop()
            continue
        here = "/".join([*resolved, part])
        if here not in links:
            resolved.append(part)
            continue
        followed += 1
        if followed > MAX_LINKS_FOLLOWED:
            return None
        target = links[here]
        if target.startswith("/"):
            resolved = []
        parts = [part for part in PurePosixPath(target).parts if part != "/"] + parts
    return "/".join(resolved)


def _compiler_on_path(
    report: ImageReport, compiler: str, files: dict[str, ImageFile], links: dict[str, str]
) -> tuple[list[str], list[str]]:
    """The programs named `compiler` in the image's search path (a link to one counts), and why each other file
    of that name is none."""
    held: list[str] = []
    wrong: list[str] = []
    seen: set[str] = set()
    for folder in report.search_path or DEFAULT_SEARCH_PATH:
        place = _resolve(folder, links)
        if place is None:
            continue
        entry = f"{place}/{compiler}" if place else compiler
        if entry in seen or (entry not in files and entry not in links):
            continue
        seen.add(entry)
        shown = f"/{folder.strip('/')}/{compiler}"
        target = _resolve(entry, links)
        if target is None:
            wrong.append(f"{shown} is a link leading out of the image or in a loop ({links[entry]})")
        elif target not in files:
            wrong.append(f"{shown} is a link to {links[entry]}, which is not in the image")
        elif not files[target].runnable:
            wrong.append(f"{shown} is not one (empty, not executable, or neither ELF nor a script)")
        else:
            held.append(shown if target == entry else f"{shown} -> /{target}")
    for path in sorted({*files, *links}):
        if PurePosixPath(path).name == compiler and path not in seen:
            wrong.append(f"/{path} is not on the image's PATH ({':'.join(report.search_path)})")
    return held, wrong


def _check_commits(
    report: ImageReport, commits: Sequence[Sequence[str]], files: dict[str, ImageFile], links: dict[str, str]
) -> None:
    """V01: the compiler in the image, each component at the seed's commit in the SBOM (the module's docstring)."""
    compiler = commits[0][0]
    held, none = _compiler_on_path(report, compiler, files, links)
    report.checked["compiler"] = held
    report.checked["search_path"] = report.search_path
    if not held:
        report.add(
            "compiler_not_in_image",
            f"the image holds no {compiler}: no program of that name on its PATH"
            + (f": {'; '.join(none[:3])}" if none else ""),
            component=compiler,
            files=none[:3],
        )
    records = _sbom_component_records(report.sbom_document)
    report.checked["commits"] = {}
    for component, prefix in commits:
        found = records.get(component.lower())
        if not found:
            report.add(
                "commit_missing",
                f"the SBOM has no component {component}: the image must give {component} at commit {prefix}…",
                component=component,
                expected_prefix=prefix,
            )
            continue
        said_by_record = [
            sorted({token.lower() for text in _commit_texts(record) for token in COMMIT.findall(text)})
            for record in found
        ]
        report.checked["commits"][component] = sorted({token for tokens in said_by_record for token in tokens})
        wrong = [tokens for tokens in said_by_record if not any(t.startswith(prefix.lower()) for t in tokens)]
        if wrong:
            others = sorted({token for tokens in wrong for token in tokens})
            report.add(
                "commit_mismatch",
                f"SBOM component {component} is at {', '.join(others[:3]) or 'no commit'}, not the {prefix}… the seed "
                "records" + (f" ({len(found)} components of that name, each must say it)" if len(found) > 1 else ""),
                component=component,
                expected_prefix=prefix,
                actual=others[:3],
            )
