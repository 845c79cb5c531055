import shutil
import subprocess

import pytest

from acceptance.inspection import sdk
from acceptance.inspection.sdk import build_example, check_sdk, sdk_library
from acceptance.recipes import recipe_for
from tests.inspection_builders import build_sdk, example_source

KV = list(recipe_for("kv-manager-api").sdk_entry_points)
RESET = list(recipe_for("device-reset").sdk_entry_points)


def nm_defined(library) -> str:
    """The seed's own command (section 2), to hold the check to it."""
    return subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True).stdout


def test_entry_points_declared_and_defined_pass(tmp_path):
    headers, library = build_sdk(tmp_path, KV + RESET)
    report = check_sdk(headers, library, KV + RESET, version="0.7.6")
    assert report.passed, report.findings
    assert report.library_version == "0.7.6"
    assert report.entry_points["KvManager::DoShift"] == {
        "declared_in": "calrt/calrt.h",
        "symbol": "calrt::KvManager::DoShift(int)",
    }
    assert report.entry_points["ClearAllDevMem"]["symbol"] == "ClearAllDevMem"
    assert report.checked["library"]["soname"] == "libcalrt-linux-x86_64.so.0.7.6"
    assert report.checked["demangled_with"] == "c++filt"
    assert report.as_dict()["passed"] is True


def test_a_declared_call_the_library_lacks_fails_by_name(tmp_path):
    headers, library = build_sdk(tmp_path, KV, undefined=("KvManager::DoShift",))
    assert "DoShift" not in nm_defined(library)
    report = check_sdk(headers, library, KV)
    assert [(f.code, f.detail) for f in report.findings] == [
        ("entry_point_not_defined", {"entry_point": "KvManager::DoShift"})
    ]
    assert (
        "KvManager::DoShift is not a defined dynamic symbol of libcalrt-linux-x86_64.so.0.7.6"
        in report.findings[0].message
    )


def test_a_call_neither_declared_nor_defined_is_both_findings(tmp_path):
    headers, library = build_sdk(tmp_path, KV)
    report = check_sdk(headers, library, ["RelocateTensorAddress", "AllocDevMem"])
    assert sorted((f.code, f.detail["entry_point"]) for f in report.findings) == [
        ("entry_point_not_declared", "AllocDevMem"),
        ("entry_point_not_declared", "RelocateTensorAddress"),
        ("entry_point_not_defined", "AllocDevMem"),
        ("entry_point_not_defined", "RelocateTensorAddress"),
    ]


def test_a_member_of_another_class_does_not_count(tmp_path):
    headers, library = build_sdk(tmp_path, ["OutputBuf::Apply"])
    report = check_sdk(headers, library, ["KvManager::Apply"])
    assert {f.code for f in report.findings} == {"entry_point_not_declared", "entry_point_not_defined"}


def test_without_cxxfilt_mangled_names_are_matched(tmp_path, monkeypatch):
    headers, library = build_sdk(tmp_path, KV + ["ClearDynamicMem"], undefined=("KvManager::Free",))
    real_which = shutil.which
    monkeypatch.setattr(sdk.shutil, "which", lambda name: None if name == "c++filt" else real_which(name))
    report = check_sdk(headers, library, KV + ["ClearDynamicMem"])
    assert report.checked["demangled_with"] is None
    assert report.entry_points["KvManager::Apply"]["symbol"] == "_ZN5calrt9KvManager5ApplyEi"
    assert [f.detail for f in report.findings] == [{"entry_point": "KvManager::Free"}]


def test_a_header_of_another_version_fails_naming_its_macro(tmp_path):
    headers, library = build_sdk(tmp_path, KV, version="0.8.0", header_version="0.7.6")
    report = check_sdk(headers, library, KV, version="0.8.0")
    assert [(f.code, f.message) for f in report.findings] == [
        (
            "version_mismatch",
            "the header macro CALRT_VERSION in calrt/calrt.h says version 0.7.6, the library's file name 0.8.0",
        )
    ]


def test_an_answer_naming_another_version_fails(tmp_path):
    headers, library = build_sdk(tmp_path, KV)
    report = check_sdk(headers, library, KV, version="0.8.0")
    assert [(f.code, f.detail) for f in report.findings] == [
        ("version_mismatch", {"source": "the answer", "version": "0.8.0", "library_version": "0.7.6"})
    ]
    assert check_sdk(headers, library, KV, version="v0.7.6").passed


def test_an_unversioned_library_fails_naming_its_file_name_and_soname(tmp_path):
    headers, library = build_sdk(tmp_path, KV, file_name="libcalrt.so")
    report = check_sdk(headers, library, KV, version="0.7.6")
    assert [(f.code, f.detail) for f in report.findings] == [
        ("version_missing", {"source": "the library's file name"}),
        ("version_missing", {"source": "the library's soname"}),
    ]
    assert report.library_version is None


def test_headers_without_a_version_macro_and_an_answer_without_a_version_fail(tmp_path):
    headers, library = build_sdk(tmp_path, KV, header_version=None)
    report = check_sdk(headers, library, KV, version="")
    assert [f.message for f in report.findings] == [
        "a header's version macro names no version",
        "the answer names no version",
    ]


def test_the_soname_chain_of_a_real_sdk_passes(tmp_path):
    headers, library = build_sdk(
        tmp_path, KV, file_name="libcalrt.so.0.7.6", soname="libcalrt.so.0", links=("libcalrt.so", "libcalrt.so.0")
    )
    assert sdk_library(library.parent) == library
    report = check_sdk(headers, library, KV, version="0.7.6")
    assert report.passed, report.findings
    assert report.checked["versions"]["the library's soname"] == "0"


def test_a_soname_without_its_link_or_of_another_major_version_fails(tmp_path):
    headers, library = build_sdk(tmp_path / "a", KV, file_name="libcalrt.so.0.7.6", soname="libcalrt.so.0")
    assert [f.code for f in check_sdk(headers, library, KV, version="0.7.6").findings] == ["soname_link_missing"]
    headers, library = build_sdk(
        tmp_path / "b", KV, file_name="libcalrt.so.0.7.6", soname="libcalrt.so.1", links=("libcalrt.so.1",)
    )
    report = check_sdk(headers, library, KV, version="0.7.6")
    assert [(f.code, f.message) for f in report.findings] == [
        ("version_mismatch", "the library's soname says version 1, the library's file name 0.7.6")
    ]


def test_lib_holds_one_library_and_links_to_it(tmp_path):
    _headers, library = build_sdk(tmp_path, KV, links=("libcalrt.so",))
    shutil.copy(library, library.parent / "libother.so.1")
    with pytest.raises(ValueError, match="exactly one shared library.*files found: libcalrt-linux"):
        sdk_library(library.parent)
    (library.parent / "libother.so.1").unlink()
    (library.parent / "libcalrt.so.0").symlink_to("/usr/lib/x86_64-linux-gnu/libc.so.6")
    with pytest.raises(ValueError, match="lib/libcalrt.so.0 is a link to /usr/lib/.*, not to libcalrt-linux"):
        sdk_library(library.parent)


def test_what_is_not_an_sdk(tmp_path):
    headers, library = build_sdk(tmp_path, KV)
    not_elf = tmp_path / "libfake.so"
    not_elf.write_text("not a library")
    assert [f.code for f in check_sdk(headers, not_elf, KV).findings] == ["library_not_elf"]
    assert [f.code for f in check_sdk(headers, tmp_path / "nothing.so", KV).findings] == ["library_missing"]
    empty = tmp_path / "empty"
    empty.mkdir()
    codes = [f.code for f in check_sdk(empty, library, KV).findings]
    assert codes[0] == "headers_missing" and set(codes[1:]) == {"version_missing", "entry_point_not_declared"}
    assert [f.code for f in check_sdk(headers, library, []).findings] == ["no_entry_points"]


def test_comments_do_not_declare(tmp_path):
    headers, library = build_sdk(tmp_path, KV)
    (headers / "calrt" / "extra.h").write_text(
        "// int AllocDevMem(int size);\n/* class VirtualDevice { int ResetCCU(); } */\n"
    )
    report = check_sdk(headers, library, ["AllocDevMem"])
    assert report.entry_points["AllocDevMem"] == {"declared_in": None, "symbol": None}


def test_the_minimal_example_builds_in_the_sandbox(tmp_path):
    headers, library = build_sdk(tmp_path, KV + RESET)
    source = tmp_path / "example.cpp"
    source.write_text(example_source(KV + RESET))
    report = build_example(headers, library, source)
    assert report.passed, report.findings
    assert report.compiler and report.checked["compiler"]["version"]
    assert report.checked["sandbox"]["exit_code"] == 0


def test_an_example_calling_a_missing_symbol_fails_to_link(tmp_path):
    headers, library = build_sdk(tmp_path, KV, undefined=("KvManager::Clear",))
    source = tmp_path / "example.cpp"
    source.write_text(example_source(KV))
    report = build_example(headers, library, source)
    assert [f.code for f in report.findings] == ["build_failed"]
    assert "KvManager::Clear" in report.findings[0].detail["output_tail"]


def test_an_example_that_does_not_compile_fails(tmp_path):
    headers, library = build_sdk(tmp_path, KV)
    source = tmp_path / "example.c"
    source.write_text("int main(void) { return undeclared_call(); }\n")
    report = build_example(headers, library, source)
    assert [f.code for f in report.findings] == ["build_failed"]
    assert "undeclared_call" in report.findings[0].detail["output_tail"]


def test_no_compiler_is_said_plainly(tmp_path, monkeypatch):
    headers, library = build_sdk(tmp_path, KV)
    source = tmp_path / "example.cpp"
    source.write_text(example_source(KV))
    monkeypatch.setattr(sdk.shutil, "which", lambda name: None)
    report = build_example(headers, library, source)
    assert [f.code for f in report.findings] == ["compiler_missing"]
    assert report.compiler is None


@pytest.mark.parametrize("name", ["example.py", "example"])
def test_an_example_in_another_language_is_refused(tmp_path, name):
    headers, library = build_sdk(tmp_path, KV)
    source = tmp_path / name
    source.write_text("print(1)\n")
    assert [f.code for f in build_example(headers, library, source).findings] == ["source_unsupported"]


def test_links_in_a_delivery_are_not_followed(tmp_path):
    headers, library = build_sdk(tmp_path / "sdk", KV)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.h").write_text("int RelocateTensorAddress(int value);\n")
    (headers / "calrt" / "linked").symlink_to(outside)
    (headers / "calrt" / "linked.h").symlink_to(outside / "secret.h")
    report = check_sdk(headers, library, ["RelocateTensorAddress"])
    assert report.checked["headers"] == ["calrt/calrt.h"]
    assert report.entry_points["RelocateTensorAddress"]["declared_in"] is None


def test_a_cxx_header_without_a_suffix_declares_and_a_binary_does_not(tmp_path):
    headers, library = build_sdk(tmp_path / "sdk", ["OutputBuf::Wait"])
    (headers / "calrt" / "calrt.h").write_text("#pragma once\n#include <calrt/buffer>\n")
    (headers / "calrt" / "buffer").write_text("namespace calrt { class OutputBuf { public: int Wait(int value); }; }\n")
    (headers / "calrt" / "blob").write_bytes(b"\0\0 int AllocDevMem(int value);")
    report = check_sdk(headers, library, ["OutputBuf::Wait", "AllocDevMem"])
    assert report.entry_points["OutputBuf::Wait"]["declared_in"] == "calrt/buffer"
    assert report.entry_points["AllocDevMem"]["declared_in"] is None
    assert "calrt/blob" not in report.checked["headers"]


DECORATED_HEADER = """#pragma once
#define CALRT_VERSION "0.7.6"
#define CALRT_API __attribute__((visibility("default")))
namespace calrt {
class OutputBuf;  // a forward declaration declares nothing
class __attribute__((visibility("default"))) KvManager final {
 public:
  [[nodiscard]] int Apply(int value);
  CALRT_API int Clear(int value);
  int Free(int value) noexcept;
  int Update(int value) { return DoShift(value); }  // a call in a body is no declaration
  int DoShift(int value);
};
class [[nodiscard]] Other {
 public:
  int Wait(int value);
};
}  // namespace calrt
"""


def test_declarations_are_parsed_with_their_attributes_and_scopes(tmp_path):
    headers, library = build_sdk(tmp_path, KV + ["Other::Wait"])
    (headers / "calrt" / "calrt.h").write_text(DECORATED_HEADER)
    report = check_sdk(headers, library, ["KvManager::Apply", "KvManager::Clear", "Other::Wait"], version="0.7.6")
    assert report.passed, report.findings
    source = tmp_path / "example.cpp"
    source.write_text(example_source(["KvManager::Apply", "KvManager::Clear", "Other::Wait"]))
    assert build_example(headers, library, source).passed  # what the check accepts, a compiler accepts


def test_a_forward_declaration_beside_another_classs_member_does_not_declare(tmp_path):
    headers, library = build_sdk(tmp_path, ["Other::Wait", "OutputBuf::Wait"])
    (headers / "calrt" / "calrt.h").write_text(DECORATED_HEADER)
    report = check_sdk(headers, library, ["OutputBuf::Wait"], version="0.7.6")
    assert [(f.code, f.detail) for f in report.findings] == [
        ("entry_point_not_declared", {"entry_point": "OutputBuf::Wait"})
    ]


def test_a_call_inside_a_function_body_does_not_declare(tmp_path):
    headers, library = build_sdk(tmp_path, ["KvManager::Update"])
    (headers / "calrt" / "extra.h").write_text(
        "namespace calrt { inline int Run() { return AllocDevMem(3); } }\nint table = ResetCCU(1);\n"
    )
    report = check_sdk(headers, library, ["AllocDevMem", "ResetCCU", "KvManager::Update"])
    assert report.entry_points["AllocDevMem"]["declared_in"] is None
    assert report.entry_points["ResetCCU"]["declared_in"] is None
    assert report.entry_points["KvManager::Update"]["declared_in"] == "calrt/calrt.h"


def test_members_in_nested_namespaces_are_declared_in_each_scope(tmp_path):
    headers, library = build_sdk(tmp_path, ["KvManager::Apply"])
    (headers / "calrt" / "calrt.h").write_text("namespace calrt::v0 { class KvManager { public: int Apply(int); }; }\n")
    points = ["calrt::v0::KvManager::Apply", "v0::KvManager::Apply", "KvManager::Apply", "calrt::KvManager::Apply"]
    report = check_sdk(headers, library, [], also_look_for=points)
    assert [bool(report.entry_points[point]["declared_in"]) for point in points] == [True, True, True, False]


def test_both_branches_of_a_conditional_do_not_hide_the_declarations_after_them(tmp_path):
    headers, library = build_sdk(tmp_path, ["KvManager::Apply", "AllocDevMem"])
    (headers / "calrt" / "calrt.h").write_text(
        "#if CALRT_OLD\nint ResetCCU(int a,\n#else\nint ResetCCU(int a, int b,\n#endif\n  int c);\n"
        "namespace calrt { class KvManager { public: int Apply(int value); }; }\n"
        'extern "C" int AllocDevMem(int value);\n'
    )
    report = check_sdk(headers, library, [], also_look_for=["ResetCCU", "KvManager::Apply", "AllocDevMem"])
    assert all(found["declared_in"] == "calrt/calrt.h" for found in report.entry_points.values())


INLINE_NAMESPACES = """namespace calrt {
inline namespace v2 {
class OutputBuf { public: int Wait(int value); };
}  // namespace v2
namespace detail { class KvManager { public: int Apply(int value); }; }
}  // namespace calrt
namespace calrt::inline v3 { int AllocDevMem(int value); }
inline namespace __cxx11 __attribute__((__visibility__("default"))) { int ResetCCU(int value); }
"""


def test_an_inline_namespace_s_members_are_declared_in_the_enclosing_one_too(tmp_path):
    """`calrt::OutputBuf::Wait` names a member of `calrt::v2::OutputBuf` when v2 is inline, as the compiler
    finds it; a namespace that is not inline stays part of the name."""
    headers, library = build_sdk(tmp_path, ["OutputBuf::Wait"])
    (headers / "calrt" / "calrt.h").write_text(INLINE_NAMESPACES)
    found = {
        "calrt::OutputBuf::Wait": True,
        "calrt::v2::OutputBuf::Wait": True,
        "v2::OutputBuf::Wait": True,
        "OutputBuf::Wait": True,
        "calrt::detail::KvManager::Apply": True,
        "calrt::KvManager::Apply": False,
        "calrt::AllocDevMem": True,
        "calrt::v3::AllocDevMem": True,
        "ResetCCU": True,
        "__cxx11::ResetCCU": True,
    }
    report = check_sdk(headers, library, [], also_look_for=list(found))
    assert {point: bool(report.entry_points[point]["declared_in"]) for point in found} == found


MACRO_HEADER = """#pragma once
#define CALRT_VERSION "0.7.6"
#define CALRT_CLASS_API(v) __attribute__((visibility(#v)))
#define CALRT_DEPRECATED(why) [[deprecated(why)]]
namespace calrt {
template <typename T, int N> struct Base {};
class CALRT_CLASS_API(default) OutputBuf;  // forward declarations, with their attributes, declare nothing
class [[deprecated("use Other")]] KvManager;
class CALRT_CLASS_API(default) OutputBuf {
 public:
  CALRT_DEPRECATED("use Wait") int WaitOld(int value);
  int Wait(int value);
};
struct [[nodiscard]] alignas(8) KvManager final : public Base<int, 2> {
  int Apply(int value);
};
class Other {
 public:
  int Clear(int value);
  int Free(int value) = delete;  // deleted: nothing to call
};
}  // namespace calrt
"""


def test_function_like_visibility_macros_and_attributes_on_a_class_do_not_hide_its_members(tmp_path):
    headers, library = build_sdk(tmp_path, ["OutputBuf::Wait", "KvManager::Apply", "Other::Clear"])
    (headers / "calrt" / "calrt.h").write_text(MACRO_HEADER)
    entries = ["OutputBuf::Wait", "KvManager::Apply", "Other::Clear"]
    report = check_sdk(headers, library, entries, version="0.7.6")
    assert report.passed, report.findings
    source = tmp_path / "example.cpp"
    source.write_text(example_source(entries))
    assert build_example(headers, library, source).passed  # what the check accepts, a compiler accepts


def test_a_deleted_function_and_a_forward_declared_class_declare_nothing(tmp_path):
    headers, library = build_sdk(tmp_path, ["Other::Free"])
    header = MACRO_HEADER.replace("class CALRT_CLASS_API(default) OutputBuf {", "class Unrelated {")
    (headers / "calrt" / "calrt.h").write_text(header)
    points = ["Other::Free", "OutputBuf::Wait", "Unrelated::Wait", "Unrelated::WaitOld", "CALRT_CLASS_API"]
    report = check_sdk(headers, library, [], also_look_for=points)
    assert {point: report.entry_points[point]["declared_in"] for point in points} == {
        "Other::Free": None,
        "OutputBuf::Wait": None,  # only forward-declared
        "Unrelated::Wait": "calrt/calrt.h",
        "Unrelated::WaitOld": None,  # behind a function-like macro before its type: not parsed as a declaration
        "CALRT_CLASS_API": None,
    }
