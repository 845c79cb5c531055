"""The names and vocabularies of a calbin package laid out as the vendor's toolchain lays it out.

docs/calbin-format.md describes every file; this module is the single list of them.
"""

SCHEMA_VERSION = 2

PACKAGE_INFO = "package_info.txt"
MODEL_CONFIG = "__Tokenizer/config.json"
MODEL_MEMORY = "model_memory_reserved_info.txt"
PARAM_TABLE = "param_table.txt"
SUBMODEL_MEMORY = "submodel_memory_reserved_info.txt"  # one per sub-model, in a directory named after it
GOLDEN = "golden/golden.npz"
CHECKSUMS = "SHA256SUMS"
LEGACY_MANIFEST = "manifest.json"  # schema 1, the simulator's own format before this one

# Two forms of the same layout. The simulator's packages add package_info.txt, param_table.txt, golden/ and
# SHA256SUMS to what the vendor's toolchain writes; the vendor's own package (A01-A17) has only the parameter
# blocks, the reservation files and __Tokenizer/config.json, so only its static facts can be checked and the
# simulator cannot place its weights.
SIMULATOR_FORM = "simulator"
VENDOR_FORM = "vendor"

# How the model is spread over the device: exactly one per package.
LAYOUTS = ("tp", "ep", "pp", "single_chiplet", "multi_board")
DEFAULT_LAYOUT = "tp"
# What a layout occupies: boards, and chiplets on each board.
LAYOUT_SHAPE = {
    "tp": (1, 2),
    "ep": (1, 2),
    "pp": (1, 2),
    "single_chiplet": (1, 1),
    "multi_board": (2, 2),
}
# Features a package may declare besides its layout.
FEATURES = ("sampling", "s8", "multi_model", "residency")
# The layouts an S8 package is built for: integer partial sums split exactly only over tensor parallelism.
S8_LAYOUTS = ("tp", "single_chiplet")

SMODEL_TYPES = ("llm_prefill", "llm_decode")
COMPAT_RANGES = ("calrt", "driver", "firmware")

# I/O dtypes as the sub-model files spell them (A09/A10), and the simulator's names for them.
IO_DTYPES = {"INT32": "s32", "BF16": "bf16", "FP32": "f32", "FP16": "f16", "INT8": "s8"}
# Parameter and cache dtypes (the simulator's names).
WEIGHT_DTYPES = ("f32", "s8")
KV_DTYPES = ("bf16", "s8")

# Memory units are binary, as memory sizes conventionally are (JEDEC): 1 MB = 1 MiB = 2**20 bytes.
MEMORY_UNITS = {
    "B": 1,
    "KB": 2**10,
    "KiB": 2**10,
    "MB": 2**20,
    "MiB": 2**20,
    "GB": 2**30,
    "GiB": 2**30,
    "TB": 2**40,
    "TiB": 2**40,
}

# ModelConfig field -> the Hugging Face Qwen3-MoE config.json key it is read from (M01-M05).
HF_CONFIG_KEYS = {
    "layers": "num_hidden_layers",
    "hidden": "hidden_size",
    "q_heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "experts": "num_experts",
    "experts_per_token": "num_experts_per_tok",
    "expert_ffn": "moe_intermediate_size",
    "vocab": "vocab_size",
    "rope_theta": "rope_theta",
    "rms_eps": "rms_norm_eps",
}
HF_MAX_POSITIONS = "max_position_embeddings"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError("unreachable")
