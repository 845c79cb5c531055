"""What each question's answer must deliver, for the questions listed here; the import creates the rows
(vendor.models.Deliverable). Data only, in the shape of evidence/seed/capabilities.py.

This list covers the questions whose acceptance the product already exercises (a calbin per batch, an SDK,
an image, a schema, documents); questions not listed have no deliverable yet and cannot be closed.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class DeliverableSeed:
    key: str  # slug unique within the question
    kind: str  # calbin | sdk | container_image | schema | document
    title: str
    capabilities: tuple[str, ...] = ()  # capability slugs it proves; calbin and sdk only
    checklist: tuple[str, ...] = ()  # document only: what a PM ticks when reviewing it
    schema_of: str = ""  # schema only: "package-metadata" or "trace"


QUESTION_DELIVERABLES: dict[str, tuple[DeliverableSeed, ...]] = {
    "V01": (
        DeliverableSeed(
            "compiler-container", "container_image", "Compiler container, offline OCI image with SBOM and licence"
        ),
    ),
    "V05": (
        DeliverableSeed(
            "onnx-schema", "schema", "Schema and checker of the accepted model package", schema_of="package-metadata"
        ),
    ),
    "V09": (
        DeliverableSeed(
            "ci-licence",
            "document",
            "Written permission to use the compiler in our CI, and how it is deployed",
            checklist=(
                "The permission is written and signed by the vendor",
                "It covers use of the compiler and its licence in our CI",
                "It says how the compiler is deployed in CI (hosts, seats, network)",
            ),
        ),
    ),
    "V12": (
        DeliverableSeed(
            "kernel-sdk",
            "sdk",
            "Custom op/kernel SDK: headers, library and example",
            capabilities=("custom-kernel-sdk",),
        ),
    ),
    "V18": (
        DeliverableSeed(
            "package-batch-4", "calbin", "Model package at decode batch 4", capabilities=("decode-batch-4",)
        ),
        DeliverableSeed(
            "package-batch-8", "calbin", "Model package at decode batch 8", capabilities=("decode-batch-8",)
        ),
        DeliverableSeed(
            "package-batch-16", "calbin", "Model package at decode batch 16", capabilities=("decode-batch-16",)
        ),
    ),
    "V60": (
        DeliverableSeed(
            "version-policy",
            "document",
            "Written API/ABI stability and release policy",
            checklist=(
                "The policy is written and dated",
                "It says which API/ABI changes a minor and a patch release may make",
                "It gives the release dates or cadence",
            ),
        ),
    ),
}
