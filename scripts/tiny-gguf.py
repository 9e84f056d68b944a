"""Writes a tiny llama-architecture model in GGUF, with fixed pseudo-random weights, for the
model-server tests: no weights can be downloaded here, and a real server needs a real file.

The model is nonsense by design (its answers are random tokens), but it is a complete llama
model llama.cpp loads and runs: a SentencePiece-style ("llama") vocabulary of the control
tokens, every printable ASCII character and the 256 byte-fallback tokens, so any prompt
tokenizes and a grammar (JSON schema, tool call) can spell anything with it. Same bytes on
every run (fixed seed, no timestamps).

Usage: python tiny-gguf.py OUT.gguf
"""

import sys

import numpy as np
import gguf

N_EMBD = 64
N_HEAD = 4
N_LAYER = 2
N_FF = 128
N_CTX = 2048
SEED = 20261125

NORMAL, UNKNOWN, CONTROL, BYTE = (
    gguf.TokenType.NORMAL,
    gguf.TokenType.UNKNOWN,
    gguf.TokenType.CONTROL,
    gguf.TokenType.BYTE,
)


def vocabulary():
    """(token, score, type) in id order: <unk>, <s>, </s>, bytes, then printable ASCII."""
    vocab = [("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL), ("</s>", 0.0, CONTROL)]
    vocab += [(f"<0x{b:02X}>", 0.0, BYTE) for b in range(256)]
    for c in range(0x20, 0x7F):
        # SentencePiece writes a space as U+2581.
        piece = "\u2581" if c == 0x20 else chr(c)
        vocab.append((piece, -1.0, NORMAL))
    return vocab


def main(out):
    vocab = vocabulary()
    rng = np.random.RandomState(SEED)

    def weights(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(n):
        return np.ones(n, dtype=np.float32)

    head_dim = N_EMBD // N_HEAD
    w = gguf.GGUFWriter(out, "llama")
    w.add_name("ari-tiny-llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    # Mean pooling: an embedding is one vector per input, not one per token.
    w.add_pooling_type(gguf.PoolingType.MEAN)

    w.add_tokenizer_model("llama")
    w.add_token_list([t for t, _, _ in vocab])
    w.add_token_scores([s for _, s, _ in vocab])
    w.add_token_types([int(k) for _, _, k in vocab])
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    n_vocab = len(vocab)
    # numpy shapes are (rows, columns); GGUF stores them reversed, as llama.cpp expects.
    w.add_tensor("token_embd.weight", weights(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(N_EMBD))
        w.add_tensor(p + "attn_q.weight", weights(N_EMBD, N_EMBD))
        w.add_tensor(p + "attn_k.weight", weights(N_EMBD, N_EMBD))
        w.add_tensor(p + "attn_v.weight", weights(N_EMBD, N_EMBD))
        w.add_tensor(p + "attn_output.weight", weights(N_EMBD, N_EMBD))
        w.add_tensor(p + "ffn_norm.weight", ones(N_EMBD))
        w.add_tensor(p + "ffn_gate.weight", weights(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", weights(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", weights(N_EMBD, N_FF))
    w.add_tensor("output_norm.weight", ones(N_EMBD))
    w.add_tensor("output.weight", weights(n_vocab, N_EMBD))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny-gguf.py OUT.gguf")
    main(sys.argv[1])
