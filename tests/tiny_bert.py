"""A tiny random BERT (+ tokenizer) built at test time, offline, in a few hundred KB.

``build_tiny_bert(folder)`` writes a plain transformers checkpoint (config.json, model.safetensors,
WordPiece tokenizer files); ``build_tiny_sentence_transformer(folder, bert_folder)`` wraps one in a
sentence-transformers folder (modules.json, pooling config, Normalize). Weights are seeded, so two
builds are identical. ``tiny_record(folder)`` is a model record that runs such a checkpoint.
"""

from __future__ import annotations

from pathlib import Path

_WORD_TEXT = (
    "the a an of and to in is on for with what how why which are was were be by from that this it "
    "as cell cells protein proteins gene genes dna rna virus bacteria cancer tumor immune blood "
    "brain study studies result results effect effects patient patients treatment disease risk "
    "increase decrease level levels high low human mouse model models data analysis method methods "
    "role query passage represent sentence searching relevant passages : , . ? - ( ) "
)
WORDS = _WORD_TEXT.split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
HIDDEN = 32


def tiny_record(folder: Path, **overrides):
    """A ``transformers``-kind record for a tiny checkpoint: mean pooling, dot product, max length 16."""
    from harness.models.model_registry import ModelRecord

    settings = dict(
        name="tiny",
        model_id=str(folder),
        kind="transformers",
        pooling="mean",
        normalize=False,
        similarity="dot",
        max_length=16,
    )
    settings.update(overrides)
    return ModelRecord(**settings)


def build_tiny_bert(folder: Path, *, seed: int = 0, max_positions: int = 64) -> Path:
    """A random 2-layer BERT with hidden size 32 and a WordPiece vocabulary of the words above."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = (
        SPECIAL
        + sorted(set(WORDS))
        + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
        + list("abcdefghijklmnopqrstuvwxyz0123456789")
    )
    vocab = list(dict.fromkeys(vocab))
    vocab_file = folder / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(
        vocab_file=str(vocab_file), do_lower_case=True, model_max_length=max_positions
    )
    tokenizer.save_pretrained(folder)

    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=max_positions,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(seed)
    model = BertModel(config)
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def build_tiny_sentence_transformer(folder: Path, bert_folder: Path, *, pooling: str = "mean") -> Path:
    """A sentence-transformers folder around the tiny BERT: Transformer -> Pooling -> Normalize."""
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Normalize, Pooling, Transformer

    transformer = Transformer(str(bert_folder), max_seq_length=48)
    modules = [transformer, Pooling(HIDDEN, pooling_mode=pooling), Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return Path(folder)


def build_tiny_cross_encoder(folder: Path, bert_folder: Path, *, seed: int = 1) -> Path:
    """A random one-output BertForSequenceClassification (a cross-encoder) sharing the tiny vocabulary."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = Path(folder)
    config = BertConfig.from_pretrained(bert_folder, num_labels=1)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config)
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    BertTokenizerFast.from_pretrained(bert_folder).save_pretrained(folder)
    return folder
