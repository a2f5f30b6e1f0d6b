"""Fetching a model from the Hugging Face hub, or from its local cache when the hub cannot be reached."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from harness.core.errors import HarnessError
from harness.models.model_registry import ModelRecord, unknown_model_error

log = logging.getLogger(__name__)

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
    record_name: str | None = None,
    advice: str | None = None,
) -> tuple[Path, str | None]:
    """Download (or find in the local Hugging Face cache) a hub model; return its folder and commit.

    Never hangs on a dead network: one metadata request with a short timeout decides whether the hub
    is reachable; if not (or ``HF_HUB_OFFLINE`` is set), only the local cache is used: the hub cache's
    own lookup first, then its ``models--org--name/snapshots/<commit>`` folders directly (a snapshot
    copied in without its ``refs``). ``record_name`` is the registry record the model belongs to, named
    in the advice so a copy made elsewhere still runs with the record's settings; ``advice`` replaces
    that advice (a record's query model is not run by ``--weights``).
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
                # The commit the hub names may already sit in the cache, copied there without its refs.
                found = cached_snapshot(model_id, info.sha)
                if found is None:
                    raise HarnessError(
                        f"could not download {model_id} from the Hugging Face hub ({_first_line(error)}); "
                        f"{hint}{advice or offline_advice(model_id, revision or info.sha, record_name)}"
                    ) from None
                return found, info.sha
            return Path(folder), info.sha
    try:
        folder = Path(snapshot_download(model_id, revision=revision, local_files_only=True))
    except Exception:
        found = cached_snapshot(model_id, revision)
        if found is None:
            raise HarnessError(
                f"cannot fetch model {model_id} ({reason}) and it is not in the local Hugging Face cache; "
                f"{hint}{advice or offline_advice(model_id, revision, record_name)}"
            ) from None
        folder = found
    # Snapshot folders are named after the commit they hold.
    return folder, folder.name if _COMMIT.fullmatch(folder.name) else revision


_COMMIT = re.compile(r"[0-9a-f]{40}")


def offline_advice(model_id: str, revision: str | None, record_name: str | None) -> str:
    """How to run the model without the hub: download it where there is network, then point at it.

    A registry model keeps its record (pooling, similarity, prompts) only with ``--model NAME
    --weights DIR``; ``--model DIR`` alone would run the folder with sentence-transformers' defaults.
    """
    pinned = f" --revision {revision}" if revision else ""
    download = f"download it where there is network (`hf download {model_id}{pinned} --local-dir DIR`)"
    if record_name:
        return f"{download}, then run it with its record's settings: --model {record_name} --weights DIR"
    return f"{download}, then pass the folder: --model DIR"


def cached_snapshot(model_id: str, revision: str | None) -> Path | None:
    """A snapshot of ``model_id`` in the Hugging Face hub cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``).

    The pinned ``revision`` when given (a commit); else the only snapshot, or the newest of several.
    """
    from huggingface_hub import constants

    snapshots = Path(constants.HF_HUB_CACHE) / f"models--{model_id.replace('/', '--')}" / "snapshots"
    if not snapshots.is_dir():
        return None
    candidates = [path for path in snapshots.iterdir() if path.is_dir() and any(path.iterdir())]
    if revision is not None:
        candidates = [path for path in candidates if path.name == revision]
    if not candidates:
        return None
    chosen = max(candidates, key=lambda path: path.stat().st_mtime)
    if len(candidates) > 1:
        log.info(
            "%s: %d snapshots in the hub cache, using the newest (%s)", model_id, len(candidates), chosen.name
        )
    return chosen


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:200]
