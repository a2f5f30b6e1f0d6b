"""Fetching a model from the Hugging Face hub, or from its local cache when the hub cannot be reached."""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.core.errors import HarnessError
from harness.models.model_registry import ModelRecord, unknown_model_error

# Seconds to wait for the Hugging Face hub before deciding it is unreachable.
HUB_TIMEOUT = 10.0
# Hub files never needed by the torch runtimes (other frameworks, exported copies).
HUB_IGNORE = [
    "*.onnx",
    "onnx/*",
    "openvino/*",
    "*.h5",
    "*.msgpack",
    "*.ot",
    "*.tflite",
    "tf_model*",
    "flax_model*",
    "rust_model*",
    "coreml/*",
]


def hub_offline() -> bool:
    """True when the user asked for no hub access (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``)."""
    value = os.environ.get("HF_HUB_OFFLINE", "") or os.environ.get("TRANSFORMERS_OFFLINE", "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def fetch_from_hub(
    model_id: str,
    revision: str | None,
    *,
    hint: str = "",
    registry: dict[str, ModelRecord] | None = None,
) -> tuple[Path, str | None]:
    """Download (or find in the local Hugging Face cache) a hub model; return its folder and commit.

    Never hangs on a dead network: one metadata request with a short timeout decides whether the hub
    is reachable; if not (or ``HF_HUB_OFFLINE`` is set), only the local cache is used.
    """
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    reason = "HF_HUB_OFFLINE is set"
    if not hub_offline():
        try:
            info = HfApi().model_info(model_id, revision=revision, timeout=HUB_TIMEOUT)
        except RepositoryNotFoundError:
            raise unknown_model_error(model_id, registry, "no such model on the Hugging Face hub") from None
        except RevisionNotFoundError:
            raise HarnessError(
                f"model {model_id} has no revision {revision!r} on the Hugging Face hub"
            ) from None
        except GatedRepoError:
            raise HarnessError(
                f"model {model_id} is gated on the Hugging Face hub: accept its terms and log in (`hf auth login`)"
            ) from None
        except Exception as error:  # network down, DNS, proxy, timeout: fall back to the local cache
            reason = f"hub unreachable: {_first_line(error)}"
        else:
            files = [sibling.rfilename for sibling in (info.siblings or [])]
            # A .bin beside a .safetensors in the same folder is the same weights twice; keep the safe format.
            safetensors_dirs = {name.rpartition("/")[0] for name in files if name.endswith(".safetensors")}
            ignore = list(HUB_IGNORE) + [
                name
                for name in files
                if name.endswith(".bin") and name.rpartition("/")[0] in safetensors_dirs
            ]
            try:
                folder = snapshot_download(
                    model_id, revision=info.sha, ignore_patterns=ignore, etag_timeout=HUB_TIMEOUT
                )
            except Exception as error:
                raise HarnessError(
                    f"could not download {model_id} from the Hugging Face hub ({_first_line(error)}); "
                    f"{hint}download it elsewhere and pass the folder: --model /path/to/folder"
                ) from None
            return Path(folder), info.sha
    try:
        folder = snapshot_download(model_id, revision=revision, local_files_only=True)
    except Exception:
        raise HarnessError(
            f"cannot fetch model {model_id} ({reason}) and it is not in the local Hugging Face cache; "
            f"{hint}download it where there is network (`hf download {model_id} --local-dir DIR`) "
            "and pass the folder: --model DIR"
        ) from None
    folder = Path(folder)
    # Snapshot folders are named after the commit they hold.
    return folder, folder.name if re.fullmatch(r"[0-9a-f]{40}", folder.name) else revision


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:200]
