"""A tiny random BERT (+ tokenizer) built at test time, offline, in a few hundred KB.

``build_tiny_bert(folder)`` writes a plain transformers checkpoint (config.json, model.safetensors,
WordPiece tokenizer files); ``build_tiny_sentence_transformer(folder, bert_folder)`` wraps one in a
sentence-transformers folder (modules.json, pooling config, Normalize). Weights are seeded, so two
builds are identical. ``tiny_record(folder)`` is a model record that runs such a checkpoint.
"""

from __future__ import annotations

import json
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


def build_tiny_bert_with_words(folder: Path, *, seed: int = 0) -> Path:
    """``build_tiny_bert`` whose tokenizer really holds the word list: on transformers 5,
    ``BertTokenizerFast(vocab_file=...)`` ignores the file and keeps only the special tokens (every
    word is [UNK]); the vocabulary is passed as ``vocab`` there. Prompt tests need words that differ.
    """
    from transformers import BertTokenizerFast

    folder = build_tiny_bert(folder, seed=seed)
    vocab_file = str(folder / "vocab.txt")
    try:
        tokenizer = BertTokenizerFast(vocab=vocab_file, do_lower_case=True, model_max_length=64)
    except TypeError:  # transformers < 5
        tokenizer = BertTokenizerFast(vocab_file=vocab_file, do_lower_case=True, model_max_length=64)
    if tokenizer.vocab_size <= len(SPECIAL):
        raise RuntimeError(f"the tiny tokenizer in {folder} holds no words")
    tokenizer.save_pretrained(folder)
    return folder


def _st_module_classes():
    try:
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Normalize, Pooling, Transformer
    return Transformer, Pooling, Normalize


def build_tiny_prompted_sentence_transformer(
    folder: Path,
    bert_folder: Path,
    *,
    prompts: dict[str, str],
    include_prompt: bool = False,
    default_prompt_name: str | None = None,
    normalize: bool = False,
) -> Path:
    """The tiny BERT as a sentence-transformers folder whose config carries ``prompts`` (and
    ``default_prompt_name``) and whose mean Pooling has ``include_prompt`` (False: prompt tokens left out).
    """
    from sentence_transformers import SentenceTransformer

    transformer_cls, pooling_cls, normalize_cls = _st_module_classes()
    transformer = transformer_cls(str(bert_folder), max_seq_length=48)
    modules = [transformer, pooling_cls(HIDDEN, pooling_mode="mean", include_prompt=include_prompt)]
    if normalize:
        modules.append(normalize_cls())
    model = SentenceTransformer(modules=modules, device="cpu", prompts=prompts)
    model.save(str(folder))
    if default_prompt_name is not None:  # written as is, even a name that is no prompt (bad-input tests)
        config_path = Path(folder) / "config_sentence_transformers.json"
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config["default_prompt_name"] = default_prompt_name
        config_path.write_text(json.dumps(config), encoding="utf-8")
    return Path(folder)


def build_tiny_decoder(folder: Path, bert_folder: Path, *, seed: int = 0, pad_token: bool = True) -> Path:
    """A random 2-layer Qwen2 (a decoder with rotary positions) on the tiny vocabulary, its tokenizer
    padding on the left as decoder embedders do; ``pad_token=False`` leaves the tokenizer without one.
    """
    import torch
    from transformers import BertTokenizerFast, Qwen2Config, Qwen2Model

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = BertTokenizerFast.from_pretrained(bert_folder)
    tokenizer.padding_side = "left"
    if not pad_token:
        tokenizer.pad_token = None
    tokenizer.save_pretrained(folder)
    config = Qwen2Config(
        vocab_size=tokenizer.vocab_size,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2Model(config)
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def build_tiny_decoder_sentence_transformer(folder: Path, decoder_folder: Path) -> Path:
    """The tiny decoder as a sentence-transformers folder: Transformer -> last-token Pooling -> Normalize."""
    from sentence_transformers import SentenceTransformer

    transformer_cls, pooling_cls, normalize_cls = _st_module_classes()
    transformer = transformer_cls(str(decoder_folder), max_seq_length=48)
    modules = [transformer, pooling_cls(HIDDEN, pooling_mode="lasttoken"), normalize_cls()]
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return Path(folder)


def build_tiny_multivector_encoder(
    folder: Path,
    bert_folder: Path,
    *,
    embedding_size: int = 8,
    query_length: int = 12,
    document_length: int = 24,
    attend_to_expansion_tokens: bool = False,
    seed: int = 2,
) -> Path:
    """The tiny BERT as a ColBERT-style sentence-transformers ``MultiVectorEncoder`` folder: Transformer
    (query/document lengths, mask-token query expansion) -> random linear projection to ``embedding_size``
    -> MultiVectorMask -> Normalize, with ``[Q] ``/``[D] `` prompts, as PyLate saves a ColBERT model.
    """
    import torch
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    transformer = Transformer(
        str(bert_folder),
        query_length=query_length,
        document_length=document_length,
        query_expansion={
            "strategy": "fixed",
            "attend": attend_to_expansion_tokens,
            "length": query_length,
        },
    )
    torch.manual_seed(seed)
    projection = Dense(
        HIDDEN, embedding_size, bias=False, activation_function=None, module_input_name="token_embeddings"
    )
    modules = [transformer, projection, MultiVectorMask(), Normalize(module_input_name="token_embeddings")]
    prompts = {"query": "[Q] ", "document": "[D] "}
    MultiVectorEncoder(modules=modules, device="cpu", prompts=prompts).save(str(folder))
    return Path(folder)


def build_tiny_bert_mlm(folder: Path, *, seed: int = 0, max_positions: int = 64) -> Path:
    """A random 2-layer BertForMaskedLM (an MLM head over the tiny vocabulary, words included): the
    backbone of a tiny SPLADE model."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    folder = Path(folder)
    build_tiny_bert_with_words(folder, seed=seed)
    tokenizer = BertTokenizerFast.from_pretrained(folder)
    config = BertConfig.from_pretrained(folder, max_position_embeddings=max_positions)
    config.vocab_size = len(tokenizer)
    torch.manual_seed(seed)
    model = BertForMaskedLM(config)
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def build_tiny_splade(
    folder: Path, mlm_folder: Path, *, inference_free_query: bool = False, seed: int = 0
) -> Path:
    """The tiny MLM as a sentence-transformers SparseEncoder folder: Transformer(fill-mask) -> SpladePooling
    (max of log(1 + ReLU(logits))). ``inference_free_query``: queries go through a seeded random
    SparseStaticEmbedding instead (a Router, as opensearch-neural-sparse models are built)."""
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import (
        Router,
        SparseStaticEmbedding,
        SpladePooling,
        Transformer,
    )

    transformer = Transformer(str(mlm_folder), transformer_task="fill-mask", max_seq_length=48)
    document_modules = [transformer, SpladePooling(pooling_strategy="max")]
    if not inference_free_query:
        modules = document_modules
    else:
        generator = torch.Generator().manual_seed(seed)
        weight = torch.rand(len(transformer.tokenizer), generator=generator)
        static = SparseStaticEmbedding(tokenizer=transformer.tokenizer, weight=weight, frozen=True)
        modules = [Router.for_query_document(query_modules=[static], document_modules=document_modules)]
    SparseEncoder(modules=modules, device="cpu", similarity_fn_name="dot").save(str(folder))
    return Path(folder)
